"""nexus with design="systematic": a fixed-size PPS sample with known inclusion probabilities, and the Hajek
correction (hajek=true) that those probabilities make possible."""

from __future__ import annotations

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import make_policy
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.inclusion import inclusion_probs, systematic_sample
from nexus.runtime.policies.nexus_ht import hajek_output
from tests.policies.test_nexus_ht import dense_output, problem


def test_systematic_sample_has_the_exact_size_and_the_stated_inclusion_probabilities():
    pi = inclusion_probs(torch.tensor([9.0, 4.0, 3.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 2.0]), 4.0)
    hits, trials = torch.zeros(pi.numel()), 4000
    for seed in range(trials):
        picked = systematic_sample(pi, torch.Generator().manual_seed(seed))
        assert picked.numel() == 4 and torch.equal(picked, picked.sort().values)
        hits[picked] += 1
    # binomial sd of a frequency is at most 0.5 / sqrt(4000) = 0.008: 0.03 is about four of them
    assert torch.allclose(hits / trials, pi.float(), atol=0.03), (hits / trials, pi)


def view_of(seed: int, budget: int = 200, length: int = 800) -> LayerView:
    keys, values, queries = problem(seed, length=length)
    return LayerView(layer_idx=0, keys=keys, values=values, positions=torch.arange(length), queries=queries,
                     budget=budget, event=0, seed=seed)


def test_the_bias_is_log_one_over_pi_of_each_sampled_block_and_zero_on_the_forced_set():
    policy = make_policy("nexus_reservoir", design="systematic", hajek=True, block_size=8)
    view = view_of(1)
    keep = policy.select(view)
    assert keep.numel() <= view.budget
    bias = view.state["logit_bias"]
    forced = policy.forced_tokens(view.stored, view.budget)
    assert float(bias[forced].abs().max()) == 0.0
    sampled = keep[~torch.isin(keep, forced)]
    assert float(bias[sampled].min()) > 0  # floor > 0 and most pi < 1 at 25% of the scored blocks
    blocks = (sampled // 8).unique()
    for block in blocks.tolist():  # a block's tokens share one inclusion probability
        span = bias[block * 8: block * 8 + 8]
        assert torch.allclose(span, span[0].expand_as(span))
    assert float(bias[~torch.isin(torch.arange(view.stored), keep)].abs().max()) == 0.0


@pytest.mark.parametrize("block_size, ratio", [(1, 0.8), (8, 0.97)])
def test_hajek_correction_brings_attention_closer_to_dense_than_the_same_kept_set_uncorrected(block_size, ratio):
    """Measured here (60 problems): b=1 0.88 vs 1.25 uncorrected, as nexus_ht per token; b=8 1.21 vs 1.26. Random
    keys have no local structure, so a block of 8 averages its tokens' attention out, its pi is near uniform and
    the correction has little to undo; on a real model neighbouring tokens' attention is correlated."""
    corrected, plain = [], []
    for seed in range(60):
        views = [view_of(seed), view_of(seed)]
        keep = make_policy("nexus_reservoir", design="systematic", hajek=True, block_size=block_size).select(views[0])
        same = make_policy("nexus_reservoir", design="systematic", block_size=block_size).select(views[1])
        assert torch.equal(keep, same) and "logit_bias" not in views[1].state  # the design alone writes no bias
        keys, values, queries = views[0].keys, views[0].values, views[0].queries
        q = queries[0, -1]
        dense = dense_output(q, keys, values)
        est, _ = hajek_output(q[None], keys[:, keep], values[:, keep], views[0].state["logit_bias"][keep])
        raw, _ = hajek_output(q[None], keys[:, keep], values[:, keep], None)
        corrected.append(float((est[0] - dense).norm()))
        plain.append(float((raw[0] - dense).norm()))
    mean_c, mean_p = sum(corrected) / len(corrected), sum(plain) / len(plain)
    print(f"b={block_size}: hajek error {mean_c:.3f} vs uncorrected {mean_p:.3f}")
    assert mean_c < ratio * mean_p, (mean_c, mean_p)


def test_the_systematic_design_fills_the_budget_exactly():
    policy = make_policy("nexus_reservoir", design="systematic")
    for seed in range(10):
        view = view_of(seed, budget=203)
        keep = policy.select(view)
        forced = policy.forced_tokens(view.stored, view.budget)
        scored_room = (view.budget - forced.numel()) // 8 * 8
        assert keep.numel() == forced.numel() + scored_room


@pytest.mark.parametrize("params, says", [
    ({"hajek": True}, "design='systematic'"),
    ({"design": "poisson"}, "design must be one of"),
    ({"design": "systematic", "unit": "line"}, "unit='block'"),
    ({"design": "systematic", "key_span": 64}, "key_span=0"),
    ({"design": "systematic", "floor": 0.0}, "floor must be > 0"),
])
def test_bad_design_knobs_get_one_clear_sentence(params, says):
    with pytest.raises(NexusError, match=says):
        make_policy("nexus_reservoir", **params)


def test_only_the_corrected_design_asks_for_the_logit_bias_attention():
    assert make_policy("nexus").requires_logit_bias  # the default is the corrected design
    assert make_policy("nexus_reservoir", design="systematic", hajek=True).requires_logit_bias
    assert not make_policy("nexus_reservoir", design="systematic").requires_logit_bias
    assert not make_policy("nexus_reservoir").requires_logit_bias


@pytest.mark.parametrize("params, says", [
    ({"unit": "line"}, "policy nexus_reservoir"),
    ({"key_span": 1}, "policy nexus_reservoir"),
    ({"design": "reservoir"}, "hajek=false"),
])
def test_reservoir_knobs_on_the_default_name_the_preset_that_takes_them(params, says):
    with pytest.raises(NexusError, match=says):
        make_policy("nexus", **params)
