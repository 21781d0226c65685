"""The paper's survival Lemma, measured on a synthetic stream of 200 eviction events.

A "subtle" block is inside the top-K at most events but sits just below the cutoff at every 10th one. Deterministic
top-K must lose it at the first such event, for good. Under n-averaged reservoir selection each event keeps it with
some probability q_e > 0, so it survives all events with probability prod_e q_e, which we predict from the
priority-key distribution alone (independent Monte Carlo with torch's RNG, not the kernel's Philox stream) and compare
with the survival the real selection code gives across many seeded streams.
"""

from __future__ import annotations

import math

import pytest
import torch

from nexus import kernels
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.nexus import NexusReservoirPolicy

N, K, EVENTS, N_AVG = 20, 16, 200, 5
SUBTLE = 0  # candidate index of the subtle block
BELOW = set(range(5, EVENTS, 10))  # 20 events where it sits just below the cutoff


def event_weights(e: int) -> torch.Tensor:
    """20 candidate weights. Normal: subtle 1.05 + 15 peers at 1.0 fill the K=16 slots, 4 light blocks at 0.001.
    Below: 16 peers at 1.0 and the subtle block at 0.95 -> rank 17, one place below the cutoff."""
    w = torch.full((N,), 0.001)
    peers = K if e in BELOW else K - 1
    w[1 : 1 + peers] = 1.0
    w[SUBTLE] = 0.95 if e in BELOW else 1.05
    return w


class FixedWeights(NexusReservoirPolicy):
    """The real nexus selection (forced blocks, reservoir or top-K) on weights given per event."""

    def weights(self, view: LayerView) -> torch.Tensor:
        return torch.cat([event_weights(view.event), torch.ones(1)])  # + the forced recent block


def select(policy: NexusReservoirPolicy, e: int, seed: int) -> torch.Tensor:
    keys = torch.zeros(1, N + 1, 1)
    view = LayerView(layer_idx=0, keys=keys, values=keys, positions=torch.arange(N + 1), queries=keys[:, -1:],
                     budget=K + 1, event=e, seed=seed)
    return policy.select(view)


def keep_probability(w: torch.Tensor, samples: int = 200_000) -> float:
    """P(subtle block among the top K priorities), priorities = mean of n draws u^(1/w), u ~ U(0, 1)."""
    gen = torch.Generator().manual_seed(1234)
    hits = 0
    for _ in range(samples // 20_000):
        u = torch.rand(20_000, N, N_AVG, generator=gen, dtype=torch.float64)
        pri = (torch.log(u) / w.double()[None, :, None]).exp().mean(-1)
        rank = (pri > pri[:, SUBTLE : SUBTLE + 1]).sum(-1)
        hits += int((rank < K).sum())
    return hits / samples


def test_top_k_loses_the_subtle_block_at_the_first_near_miss():
    policy = FixedWeights(block_size=1, window=1, sink_tokens=0, recent_tokens=1, forced_cap=1.0, n="det")
    alive = [True]
    for e in range(EVENTS):
        alive.append(alive[-1] and SUBTLE in select(policy, e, seed=0).tolist())
    first = min(BELOW)
    assert all(alive[1 : first + 1]) and not any(alive[first + 1 :])


@pytest.mark.slow  # ~40 s: 200 events x 800 streams of Philox draws in torch
def test_reservoir_survival_matches_the_product_of_keep_probabilities():
    policy = FixedWeights(block_size=1, window=1, sink_tokens=0, recent_tokens=1, forced_cap=1.0, n=N_AVG)
    # the policy path and the vectorised kernel path below rank with the same priorities
    for e in (0, 5):
        keep = select(policy, e, seed=3)
        assert keep.numel() == K + 1 and keep[-1] == N

    trials = 800
    alive = torch.arange(trials)  # streams in which the subtle block is still cached
    curve = []
    for e in range(EVENTS):
        # every live stream gets fresh Philox counters at every event (seed per event, counter per stream slot),
        # so draws are independent; dead streams need none (the kernel's torch version is slow on CPU)
        w = event_weights(e).repeat(alive.numel())
        log_pri = kernels.reservoir_log_priorities(w, N_AVG, seed=10_000 + e).reshape(-1, N)
        kept = torch.topk(log_pri, K, dim=1).indices
        alive = alive[(kept == SUBTLE).any(dim=1)]
        curve.append(alive.numel() / trials)

    q_normal, q_below = keep_probability(event_weights(0)), keep_probability(event_weights(5))
    assert 0 < q_below < 1 and q_below < q_normal
    predicted = [q_normal ** (e + 1 - nb) * q_below**nb for e, nb in
                 ((e, sum(1 for b in BELOW if b <= e)) for e in range(EVENTS))]
    print(f"q_normal {q_normal:.5f} q_below {q_below:.4f}; survival after 200 events: measured {curve[-1]:.3f}, "
          f"predicted {predicted[-1]:.3f}")
    assert curve[-1] > 0.05  # survives all 200 events in a sizeable fraction of streams
    for e in (5, 50, 100, EVENTS - 1):
        p = predicted[e]
        sd = math.sqrt(p * (1 - p) / trials) + 0.01 * p  # sampling error + the prediction's own MC error
        assert abs(curve[e] - p) < 4 * sd, (e, curve[e], p)
