"""The nexus presets resolve to their documented knobs, the forced set respects its cap, and the new knobs do what
docs/policies.md says (walk rows, hub, top slice); nexus runs at 10% of a 2K context with chunk 64."""

from __future__ import annotations

import math

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.policies.nexus import hub_scores, walk_scores
from tests.policies.test_hand_examples import ln, view
from tests.runtime.test_stream_exactness import random_ids

DOCUMENTED = {  # docs/policies.md and shared/nexus-method.md
    "nexus_paper": dict(block_size=32, window=16, walk_steps=3, walk_rows="oldest", lam=0.5, n=5, sink_tokens=128,
                        recent_tokens=128, forced_cap=1.0, prefill_score="walk", top_share=0.0, dense_layers=0),
    "nexus_draft": dict(block_size=64, window=16, prefill_window=32, walk_steps=3, n=4, prefill_score="hub",
                        sink_tokens=256, recent_tokens=256, forced_cap=1.0, dense_layers=2),
    "nexus_reservoir": dict(block_size=8, window=16, walk_steps=3, lam=0.5, n=5, sink_tokens=4, recent_tokens=16,
                            forced_cap=0.25, design="reservoir", hajek=False),
    "nexus": dict(block_size=1, window=16, walk_steps=3, lam=0.5, sink_tokens=4, recent_tokens=64,
                  forced_cap=0.25, design="systematic", hajek=True, floor=0.1, anchor_tokens=0, anchor_start=0,
                  surprise_share=0.5),
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_presets_resolve_to_the_documented_knobs(name):
    got = make_policy(name).describe()
    assert got["policy"] == name
    assert {k: got[k] for k in DOCUMENTED[name]} == DOCUMENTED[name]


def test_paper_preset_forces_what_the_paper_forces():
    # 4 sink blocks + 4 recent blocks of 32 + the partial block; plus one scored block = 319, as before the presets
    policy = make_policy("nexus_paper")
    assert policy.min_budget() == 319
    stored = 32 * 12 + 5
    forced = policy.forced_tokens(stored, budget=2048)
    assert forced.tolist() == list(range(128)) + list(range(32 * 8, stored))


def test_a_preset_knob_can_be_overridden_and_an_unknown_one_is_named():
    assert make_policy("nexus_paper", b=16).describe()["block_size"] == 16
    with pytest.raises(NexusError, match="no parameter .sink_blocks.; its parameters:.*block_size \\(int\\)"):
        make_policy("nexus", sink_blocks=4)


@pytest.mark.parametrize("params", [{}, dict(block_size=8), dict(block_size=32), dict(sink_tokens=64,
                                                                                       recent_tokens=96)])
def test_forced_set_never_exceeds_its_cap(params):
    policy = make_policy("nexus", **params)
    cap = policy.knobs.forced_cap
    smallest = math.ceil((policy.min_budget() - policy.block_size) / cap)
    for budget in range(smallest, 3000, 29):
        for stored in range(budget + 1, budget + 80, 7):
            forced = policy.forced_tokens(stored, budget)
            assert forced.numel() <= cap * budget, (budget, stored, forced.numel())
            held = set(forced.tolist())
            assert set(range(stored - policy.knobs.window, stored)) <= held  # the window's own tokens
            assert 0 in held  # a sink block
    with pytest.raises(NexusError, match="too small"):
        policy.check_budget(smallest - 1)


def test_a_large_forced_set_shrinks_under_the_cap_instead_of_failing():
    policy = make_policy("nexus", sink_tokens=64, recent_tokens=256)  # 64 + 256 + 15 tokens as configured
    assert policy.forced_tokens(2100, budget=2000).numel() > 300  # fits under 25% of 2000: as configured
    small = policy.forced_tokens(420, budget=400)  # must fit 100 tokens: recency shrinks first, then sinks
    assert small.numel() <= 100 and set(range(420 - 16, 420)) <= set(small.tolist())


def test_nexus_runs_at_ten_percent_of_a_2k_context_with_chunk_64(tiny_llama):
    model, tok = tiny_llama
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=205, chunk_size=64, seed=1)
    stream.append(random_ids(2048, len(tok), seed=9))
    stream.generate(20, temperature=1.0, seed=2)
    assert stream.stats.eviction_events > 20
    assert max(stream.cache.stored_lengths()) <= 205 + 16  # at most tau - 1 decoded tokens wait for an event
    with pytest.raises(NexusError, match="make_policy|forced|too small"):
        InferenceStream(model, tok, make_policy("nexus_paper"), budget=205, chunk_size=64)


def test_walk_rows_pick_the_oldest_the_newest_or_all_rows():
    dist = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
    assert walk_scores(dist, 1, "oldest").tolist() == [1.0, 0, 0]
    assert walk_scores(dist, 1, "newest").tolist() == [0, 0, 1.0]
    assert torch.allclose(walk_scores(dist, 0, "all"), torch.full((3,), 1 / 3))


def test_hub_equals_the_base_score_when_rows_are_distributions():
    dist = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])
    assert torch.allclose(hub_scores(dist), dist.mean(0))


@pytest.mark.parametrize("name", ["nexus", "nexus_reservoir"])
def test_top_share_always_keeps_the_top_slice(name):
    # 12 blocks of 1 token; the last is forced (window 1). Scored budget 4: top_share 0.5 keeps the 2 heaviest
    # every time, the design (systematic PPS or the reservoir) draws the other 2 from the rest.
    policy = make_policy(name, b=1, W=1, H=0, n=1, sink_tokens=0, recent_tokens=1, forced_cap=1.0, top_share=0.5)
    c = [1, 1, 30, 1, 1, 20, 1, 1, 1, 1, 1, 1]
    seen = set()
    for seed in range(40):
        v = view(ln([c]), torch.ones(1, 1, 1), budget=5)
        v.seed = seed
        keep = policy.select(v).tolist()
        assert len(keep) == 5 and {2, 5, 11} <= set(keep)
        seen |= set(keep)
    assert len(seen) > 6  # the tail really is sampled


def test_carry_remembers_a_block_that_earlier_events_weighed_heavily():
    # event 1: block 2 is heavy; event 2: every block equal. With carry the remembered weight keeps block 2 on top.
    policy = make_policy("nexus_reservoir", b=1, W=1, H=0, n="det", sink_tokens=0, recent_tokens=1, forced_cap=1.0,
                         carry=0.5)
    first = view(ln([[1, 1, 50, 1, 1, 1]]), torch.ones(1, 1, 1), budget=5)
    assert 2 in policy.select(first).tolist()
    state = first.state
    assert state["nexus_carry"].shape == (6,)  # per token; the cache compacts it with each keep
    flat = view(ln([[1, 1, 1, 1, 1, 1]]), torch.ones(1, 1, 1), budget=2, state=state)
    assert policy.select(flat).tolist() == [2, 5]
    no_carry = make_policy("nexus_reservoir", b=1, W=1, H=0, n="det", sink_tokens=0, recent_tokens=1, forced_cap=1.0)
    assert no_carry.select(view(ln([[1, 1, 1, 1, 1, 1]]), torch.ones(1, 1, 1), budget=2)).tolist() == [4, 5]
