"""nexus_ht: known inclusion probabilities, the Hajek correction inside the softmax, and its error certificate."""

from __future__ import annotations

import math

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.nexus_ht import Z95, hajek_output, inclusion_probs
from tests.policies.conftest import VOCAB, geometry_model, random_ids


def test_inclusion_probabilities_sum_to_the_target_and_cap_at_one():
    scores = torch.tensor([10.0, 5.0, 1.0, 1.0, 1.0, 0.5, 0.5])
    pi = inclusion_probs(scores, 3.0)
    assert math.isclose(float(pi.sum()), 3.0, rel_tol=1e-6)
    assert float(pi.max()) <= 1.0 and pi[0] == 1.0
    free = pi < 1
    ratio = pi[free] / scores[free]  # proportional to the score below the cap
    assert torch.allclose(ratio, ratio[0].expand_as(ratio))


def problem(seed: int, length: int = 800, dim: int = 16, window: int = 16):
    """Random keys/queries; values a random linear map of the keys plus noise (in a transformer K and V project the
    same hidden state, so what attention favours also differs in value: that is what the correction must undo)."""
    g = torch.Generator().manual_seed(seed)
    keys = 1.5 * torch.randn(1, length, dim, generator=g)
    mix = torch.randn(dim, dim, generator=g) / math.sqrt(dim)
    values = keys @ mix + torch.randn(1, length, dim, generator=g)
    queries = torch.randn(1, window, dim, generator=g)
    return keys, values, queries


def dense_output(query, keys, values):
    p = torch.softmax(keys[0] @ query / math.sqrt(query.numel()), dim=0)
    return p @ values[0]


def test_hajek_correction_beats_the_uncorrected_kept_set_and_the_certificate_covers():
    policy = make_policy("nexus_ht")
    err_hajek, err_plain, covered, trials = [], [], 0.0, 200
    for seed in range(trials):
        keys, values, queries = problem(seed)
        view = LayerView(layer_idx=0, keys=keys, values=values, positions=torch.arange(keys.shape[1]),
                         queries=queries, budget=200, event=0, seed=seed)
        keep = policy.select(view)
        assert keep.numel() <= 200
        bias = view.state["logit_bias"][keep]
        q = queries[0, -1]  # the newest query, which sees every key
        dense = dense_output(q, keys, values)
        est, var = hajek_output(q[None], keys[:, keep], values[:, keep], bias)
        plain, _ = hajek_output(q[None], keys[:, keep], values[:, keep], None)
        err_hajek.append(float((est[0] - dense).norm()))
        err_plain.append(float((plain[0] - dense).norm()))
        # nominal 95% interval per output coordinate: est_d +- 1.96 * sqrt(V_d)
        covered += float(((est[0] - dense).abs() <= Z95 * var[0].sqrt()).float().mean())
    mean_h, mean_p = sum(err_hajek) / trials, sum(err_plain) / trials
    print(f"hajek error {mean_h:.3f} vs uncorrected {mean_p:.3f}; coverage {covered / trials:.3f}")
    assert mean_h < 0.85 * mean_p, (mean_h, mean_p)  # measured here: 0.87 vs 1.28
    assert covered / trials >= 0.90, covered / trials  # measured here: 0.92 (nominal 0.95)


def test_without_hajek_the_kept_set_is_the_same_and_no_bias_is_written():
    keys, values, queries = problem(3)
    views = [LayerView(layer_idx=0, keys=keys, values=values, positions=torch.arange(keys.shape[1]), queries=queries,
                       budget=200, event=0, seed=3) for _ in range(2)]
    corrected = make_policy("nexus_ht").select(views[0])
    plain = make_policy("nexus_ht", hajek=False).select(views[1])
    assert torch.equal(corrected, plain)
    assert float(views[0].state["logit_bias"].max()) > 0 and "logit_bias" not in views[1].state


def test_hard_cap_keeps_the_budget_when_the_margin_is_zero():
    policy = make_policy("nexus_ht", margin_sd=0.0)  # expected count = tail budget: the cap binds often
    for seed in range(40):
        keys, values, queries = problem(seed, length=400)
        view = LayerView(layer_idx=0, keys=keys, values=values, positions=torch.arange(400), queries=queries,
                         budget=120, event=seed, seed=0)
        assert policy.select(view).numel() <= 120
    assert policy.cap_hits > 0


def test_stream_publishes_a_certificate(tokenizer):
    model = geometry_model("gqa", VOCAB)
    stream = InferenceStream(model, tokenizer, make_policy("nexus_ht", decode_period=8), budget=300, chunk_size=64)
    stream.append(random_ids(700, VOCAB))
    cert = stream.stats.certificate
    assert cert is not None and cert["layers"] == 3 and cert["rse_max"] > 0 and cert["layer_events"] > 0
    stream.generate(10, temperature=1.0)
    assert stream.stats.certificate["rse_max"] >= stream.stats.certificate["rse_mean"] > 0


def test_eager_attention_is_refused_not_silently_uncorrected(tokenizer):
    model = geometry_model("mha", VOCAB, layers=2)
    stream = InferenceStream(model, tokenizer, make_policy("nexus_ht"), budget=300, chunk_size=64)
    stream.append(random_ids(100, VOCAB))
    model.set_attn_implementation("eager")
    with pytest.raises(NexusError, match="logit bias"):
        stream.append(random_ids(10, VOCAB))
