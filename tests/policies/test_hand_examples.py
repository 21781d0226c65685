"""Each baseline's selection on tiny tensors worked out by hand, so the scoring rules are the papers' own.

Head dim 1 keeps the arithmetic visible: with query q and key k the logit is q*k, so keys k_j = ln(c_j) and q = 1
give attention p_j = c_j / sum(c) over the visible keys.
"""

from __future__ import annotations

import math

import pytest
import torch

from nexus.runtime import make_policy
from nexus.runtime.policies.ada_snapkv import adaptive_counts
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.h2o import STATE, chunk_attention
from nexus.runtime.policies.nexus import walk_scores
from nexus.runtime.policies.pyramidkv import pyramid


def view(keys, queries, budget, state=None):
    keys = torch.as_tensor(keys, dtype=torch.float32)
    queries = torch.as_tensor(queries, dtype=torch.float32)
    return LayerView(layer_idx=0, keys=keys, values=torch.zeros_like(keys), positions=torch.arange(keys.shape[1]),
                     queries=queries, budget=budget, event=0, seed=0, state=state or {})


def ln(values):
    return [[[math.log(v)] for v in row] for row in values]


def test_streaming_llm_keeps_sinks_and_the_newest():
    policy = make_policy("streaming_llm", sinks=2)
    keep = policy.select(view(torch.zeros(1, 10, 1), torch.zeros(1, 1, 1), budget=5))
    assert keep.tolist() == [0, 1, 7, 8, 9]


def test_random_is_uniform_over_the_non_forced_tokens():
    policy = make_policy("random", sinks=2, recent=2)
    counts = torch.zeros(20)
    for seed in range(600):
        v = view(torch.zeros(1, 20, 1), torch.zeros(1, 1, 1), budget=9)
        v.seed = seed
        keep = policy.select(v)
        assert keep.numel() == 9 and {0, 1, 18, 19} <= set(keep.tolist())
        counts[keep] += 1
    freq = counts[2:18] / 600
    # 5 of 16 candidates per event: each kept with probability 5/16; 600 draws -> sd 0.019
    assert float((freq - 5 / 16).abs().max()) < 0.07


def test_tova_keeps_the_last_querys_head_averaged_top():
    # two query heads on one KV head; the last query is what scores. Keys k = [0, 1, 2, 3, 4, 5]:
    # head 0 (q=+1) prefers late keys, head 1 (q=-0.5) early ones; averaged, both ends beat the middle:
    # p0 = (.004 .012 .032 .086 .233 .634), p1 = (.414 .251 .152 .092 .056 .034) -> mean ranks 5, 0, 4, 1, 2, 3
    policy = make_policy("tova")
    keys = [[[0.0], [1.0], [2.0], [3.0], [4.0], [5.0]]]
    keep = policy.select(view(keys, [[[1.0]], [[-0.5]]], budget=4))
    p0 = [math.exp(k) for k in range(6)]
    p1 = [math.exp(-0.5 * k) for k in range(6)]
    avg = [(a / sum(p0) + b / sum(p1)) / 2 for a, b in zip(p0, p1)]
    assert sorted(range(6), key=lambda j: -avg[j])[:4] == [5, 0, 4, 1]  # the hand ranking
    assert keep.tolist() == [0, 1, 4, 5]


def test_h2o_accumulates_attention_and_keeps_heavy_hitters_per_head():
    # one query on keys ln(1), ln(2), ln(3): probabilities 1/6, 2/6, 3/6
    keys = torch.tensor([[[0.0], [math.log(2)], [math.log(3)]]])
    acc = chunk_attention(torch.ones(1, 1, 1), keys)
    assert torch.allclose(acc, torch.tensor([[1 / 6, 2 / 6, 3 / 6]]))
    # a chunk of two queries is causal: the first sees only keys 0..1 of 3 -> (1/3, 2/3, 0), the second all
    acc2 = chunk_attention(torch.ones(1, 2, 1), keys)
    assert torch.allclose(acc2, torch.tensor([[1 / 3 + 1 / 6, 2 / 3 + 2 / 6, 3 / 6]]))
    # selection: recent half of the budget, then per-head largest accumulated scores
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.2, 0.3, 0.0, 0.0, 0.0],
                           [0.1, 0.8, 0.2, 0.7, 0.1, 0.0, 0.0, 0.0]])
    policy = make_policy("h2o")
    keep = policy.select(view(torch.zeros(2, 8, 1), torch.zeros(2, 1, 1), budget=6, state={STATE: scores}))
    assert keep.tolist() == [[0, 2, 4, 5, 6, 7], [1, 2, 3, 5, 6, 7]]


@pytest.mark.parametrize("pooling, expected", [("avgpool", [5, 6]), ("maxpool", [1, 2])])
def test_snapkv_pools_window_attention_before_top_k(pooling, expected):
    # 10 tokens, window = the last 2. Keys ln(c) with c = 1 1 5 1 1 4 4 1 | 1 1, queries 1: both window rows give
    # prefix token j attention c_j / Z_row, so the window sum is c_j * (1/Z_8 + 1/Z_9), proportional to c.
    # kernel 3, zero padding: avg  = [2, 7, 7, 7, 6, 9, 9, 5] / 3 -> top-2 = {5, 6}
    #                         max  = [1, 5, 5, 5, 4, 4, 4, 4]     -> top-2 = {1, 2} (ties: older first)
    # raw top-2 would be {2, 5}: the pooling is what decides.
    c = [1, 1, 5, 1, 1, 4, 4, 1, 1, 1]
    policy = make_policy("snapkv", window=2, kernel=3, pooling=pooling)
    keep = policy.select(view(ln([c]), torch.ones(1, 2, 1), budget=4))
    assert keep.tolist() == [expected + [8, 9]]


def test_snapkv_selects_per_kv_head_from_its_query_groups_mean():
    # 2 KV heads x 2 query heads each. KV head 0's keys favour token 1, KV head 1's favour token 3.
    c0 = [1, 9, 1, 1, 1, 1]
    c1 = [1, 1, 1, 9, 1, 1]
    policy = make_policy("snapkv", window=1, kernel=1)
    keep = policy.select(view(ln([c0, c1]), torch.ones(4, 1, 1), budget=2))
    assert keep.tolist() == [[1, 5], [3, 5]]


def test_pyramid_budgets_by_hand():
    # 4 layers, budget 100 with window 32: scored s = 68; min = 68/20 = 3.4, max = 2*68 - 3.4 = 132.6,
    # step 43.0667 -> 132.6, 89.53, 46.47, 3.4 -> floors 132, 89, 46, 3 (sum 270), 2 short -> +1 to the two
    # largest remainders (.6 and .53) -> 133, 90, 46, 3; plus the window: 165, 122, 78, 35 (sum 400 = 4 * 100)
    assert pyramid(4, 68, 20.0) == (133, 90, 46, 3)
    policy = make_policy("pyramidkv")
    assert [policy.layer_budget(i, 4, 100) for i in range(4)] == [165, 122, 78, 35]
    assert [make_policy("pyramidkv", dense_layers=1).layer_budget(i, 4, 100) for i in range(4)][0] == 100


def test_ada_kv_gives_spread_heads_more_tokens():
    # K = 3 per head, alpha = 1/3 -> safeguard: each head's top 1 (0.3 and 0.6). The other 4 of the 6 slots go to
    # the largest remaining scores of both heads: 0.25, 0.2, 0.15 (head 0) and 0.02 (head 1) -> counts 4 and 2.
    scores = torch.tensor([[0.3, 0.25, 0.2, 0.15], [0.6, 0.02, 0.01, 0.01]])
    _, counts = adaptive_counts(scores, 3, 1 / 3)
    assert counts.tolist() == [4, 2]
    _, counts = adaptive_counts(scores, 3, 1.0)  # alpha = 1: every head keeps its own K (plain SnapKV)
    assert counts.tolist() == [3, 3]


def test_ada_snapkv_pads_the_short_head_with_minus_one():
    c0 = [3, 2.5, 2, 1.5, 1, 1]  # spread
    c1 = [60, 0.2, 0.1, 0.1, 1, 1]  # peaked
    policy = make_policy("ada_snapkv", window=1, kernel=1, alpha=0.0)
    keep = policy.select(view(ln([c0, c1]), torch.ones(2, 1, 1), budget=3))
    # 4 scored slots in total (2 per head): head 0's scores beat all of head 1's but its first
    assert keep.tolist() == [[0, 1, 2, 5], [0, 5, -1, -1]]


@pytest.mark.parametrize("fusion, expected", [("sum", [0, 1]), ("max", [0, 2])])
def test_morphkv_fuses_the_recent_windows_profiles(fusion, expected):
    # head dim 2 with scale 1/sqrt(2): q_a = (sqrt2, 0), q_b = (0, sqrt2) make logits x_j for row a, y_j for row b.
    # Distant tokens 0..3, recent 4..5. Row a (position 4) sees keys 0..4, row b all 6.
    x = [math.log(v) for v in (8, 4, 1, 1, 1, 1)]
    y = [math.log(v) for v in (1, 3, 5, 1, 1, 1)]
    za, zb = 8 + 4 + 1 + 1 + 1, 1 + 3 + 5 + 1 + 1 + 1
    pa = [8 / za, 4 / za, 1 / za, 1 / za]
    pb = [1 / zb, 3 / zb, 5 / zb, 1 / zb]
    fused = [a + b for a, b in zip(pa, pb)] if fusion == "sum" else [max(a, b) for a, b in zip(pa, pb)]
    assert sorted(sorted(range(4), key=lambda j: -fused[j])[:2]) == expected  # the hand computation
    keys = [[[a, b] for a, b in zip(x, y)]]
    s2 = math.sqrt(2)
    policy = make_policy("morphkv", recent=2, fusion=fusion)
    keep = policy.select(view(keys, [[[s2, 0.0], [0.0, s2]]], budget=4))
    assert keep.tolist() == [expected + [4, 5]]


def test_nexus_walk_by_hand():
    # rows a1 = (.5, .5, 0), a2 = (0, .5, .5); H = 2: C = a1; C += (1 + <a2, C>) a2 = (1.25) a2
    # C = (.5, 1.125, .625), |C| = 2.25 -> c = (2/9, 1/2, 5/18)
    dist = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    assert torch.allclose(walk_scores(dist, 2), torch.tensor([2 / 9, 1 / 2, 5 / 18]))
    assert torch.equal(walk_scores(dist, 0), torch.zeros(3))  # H = 0: the walk ablated, w = a only


def test_nexus_det_is_top_k_on_nexus_weights():
    policy = make_policy("nexus", b=2, W=2, H=0, n="det", sink_tokens=2, recent_tokens=2, forced_cap=1.0)
    # 6 blocks of 2 tokens, blocks 0 and 5 forced; budget 8 -> 2 scored blocks. Keys ln(c) per token.
    c = [1, 1, 1, 1, 9, 9, 1, 1, 5, 5, 1, 1]
    keep = policy.select(view(ln([c]), torch.ones(1, 2, 1), budget=8))
    assert keep.tolist() == [0, 1, 4, 5, 8, 9, 10, 11]
