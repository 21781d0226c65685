"""One contract for every registered policy: budget, forced tokens, positions, seeding, GQA and MHA."""

from __future__ import annotations

import pytest
import torch

from nexus.runtime import REGISTRY, InferenceStream, make_policy
from tests.policies.conftest import VOCAB, geometry_model, random_ids, valid_positions

BUDGET, CHUNK, TAU = 400, 64, 8
EVICTING = sorted(name for name in REGISTRY if name != "dense")


def forced_positions(name: str, budget: int) -> tuple[int, int]:
    """(sink positions 0..s-1, newest r positions) each policy promises to keep at its default settings."""
    return {
        "random": (4, 32), "streaming_llm": (4, budget - 4), "h2o": (0, budget // 2), "tova": (0, 1),
        "snapkv": (0, 32), "pyramidkv": (0, 32), "ada_snapkv": (0, 32), "morphkv": (0, 32),
        "nexus": (4, 16), "nexus_paper": (4 * 32, 4 * 32), "nexus_draft": (4 * 64, 4 * 64),
        "nexus_reservoir": (4, 16),
        "nexus_ht": (4, 32),
    }[name]


def check_layers(stream, name: str) -> None:
    policy = stream.policy
    sinks, recent = forced_positions(name, BUDGET)
    newest = stream.tokens_seen - 1
    for idx, layer in enumerate(stream.cache.layers):
        if idx < policy.dense_layers:
            continue
        budget = stream.layer_budgets[idx]
        rows = valid_positions(layer)
        # budget: K/V slots actually useful, on average over KV heads (what bytes the budget buys)
        assert sum(r.numel() for r in rows) / len(rows) <= budget, (idx, [r.numel() for r in rows], budget)
        if policy.name != "ada_snapkv":
            assert all(r.numel() <= budget for r in rows)
        for r in rows:
            assert bool((r[1:] > r[:-1]).all()), "stored positions must be strictly increasing"
            held = set(r.tolist())
            assert set(range(min(sinks, newest + 1))) <= held, "sink tokens evicted"
            assert set(range(max(0, newest - min(recent, budget) + 1), newest + 1)) <= held, "recent tokens evicted"


_RUNS: dict = {}


def run(model, tok, name: str, seed: int) -> InferenceStream:
    """One checked prefill+decode stream per (model, policy, seed), shared by the tests of this module."""
    key = (id(model), name, seed)
    if key not in _RUNS:
        _RUNS[key] = _run(model, tok, name, seed)
    return _RUNS[key]


def budget_for(policy) -> int:
    """BUDGET, or the smallest budget the policy runs at where its forced set is larger (nexus_draft)."""
    return max(BUDGET, policy.min_budget() + CHUNK)


def _run(model, tok, name: str, seed: int, mode: str = "prefill+decode") -> InferenceStream:
    policy = make_policy(name, mode=mode, decode_period=TAU)
    budget = budget_for(policy)
    stream = InferenceStream(model, tok, policy, budget=budget, chunk_size=CHUNK, seed=seed)
    ids = random_ids(300 + budget, VOCAB, seed=7)
    for start in range(0, len(ids), 200):
        stream.append(ids[start : start + 200])
        check_layers(stream, name)
    for _ in range(3):
        stream.generate(TAU, temperature=1.0, seed=seed)
        check_layers(stream, name)
    return stream


@pytest.mark.parametrize("name", EVICTING)
def test_policy_contract(geo, name):
    kind, model, tok = geo
    a = run(model, tok, name, seed=1)
    assert a.stats.eviction_events >= 5
    assert min(a.cache.stored_lengths()) < a.tokens_seen  # some layer really evicted
    assert a.stats.stored_bytes <= a.stats.cache_bytes
    # same seed -> same selection, layer by layer and head by head
    b = _run(model, tok, name, seed=1)
    for la, lb in zip(a.cache.layers, b.cache.layers):
        assert torch.equal(la.positions, lb.positions)


@pytest.mark.parametrize("name", ["random", "nexus", "nexus_paper", "nexus_ht"])
def test_randomized_policies_depend_on_the_seed(geo, name):
    kind, model, tok = geo
    a, b = run(model, tok, name, seed=1), run(model, tok, name, seed=2)
    assert any(not torch.equal(la.positions, lb.positions) for la, lb in zip(a.cache.layers, b.cache.layers))


@pytest.fixture(scope="module")
def gqa_model():
    return geometry_model("gqa", VOCAB, seed=1)


@pytest.mark.parametrize("name", EVICTING)
def test_prefill_mode_never_evicts_while_decoding(gqa_model, tokenizer, name):
    model, tok = gqa_model, tokenizer
    policy = make_policy(name, mode="prefill")
    stream = InferenceStream(model, tok, policy, budget=budget_for(policy), chunk_size=CHUNK)
    stream.append(random_ids(200 + budget_for(policy), VOCAB, seed=3))
    events, stored = stream.stats.eviction_events, stream.stats.tokens_stored
    assert events > 0
    stream.generate(20, temperature=1.0)
    assert stream.stats.eviction_events == events
    assert stream.stats.tokens_stored == stored + 20


def test_pyramid_budgets_sum_to_the_uniform_total(tokenizer):
    model = geometry_model("gqa", VOCAB, layers=6)
    stream = InferenceStream(model, tokenizer, make_policy("pyramidkv"), budget=BUDGET, chunk_size=CHUNK)
    budgets = stream.layer_budgets
    assert sum(budgets) == 6 * BUDGET
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > BUDGET > budgets[-1]
