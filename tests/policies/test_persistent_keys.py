"""Persistent reservoir keys (`key_span` > 0): a block keeps its draws for its lifetime, so over a stream of eviction
events the cache holds a weighted sample of everything seen instead of surviving a new lottery at every event."""
from __future__ import annotations

import pytest
import torch

from nexus import kernels
from nexus.errors import NexusError
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.nexus import NexusReservoirPolicy

BUDGET, CHUNK, EVENTS = 64, 16, 30


class FlatWeights(NexusReservoirPolicy):
    """The real nexus selection on equal weights: only the reservoir's draws decide."""

    def weights(self, view: LayerView) -> torch.Tensor:
        return torch.ones(-(-view.stored // self.block_size))


def run_stream(policy: NexusReservoirPolicy, seed: int = 7) -> tuple[torch.Tensor, int]:
    """Append CHUNK tokens per event and evict to BUDGET; returns the positions stored at the end and the count seen."""
    positions = torch.arange(BUDGET)
    seen = BUDGET
    for event in range(EVENTS):
        positions = torch.cat([positions, torch.arange(seen, seen + CHUNK)])
        seen += CHUNK
        keys = torch.zeros(1, positions.numel(), 1)
        view = LayerView(layer_idx=3, keys=keys, values=keys, positions=positions, queries=keys[:, -1:],
                         budget=BUDGET, event=event, seed=seed)
        positions = positions[policy.select(view)]
    return positions, seen


def knobs(**extra) -> dict:
    return dict(block_size=1, window=1, sink_tokens=0, recent_tokens=1, forced_cap=1.0, n=5, **extra)


def test_persistent_keys_keep_the_top_of_everything_seen() -> None:
    """With persistent keys the cache after any number of events is exactly the top BUDGET - 1 keys over every token
    seen (plus the forced newest), the invariant of reservoir sampling over a stream."""
    policy = FlatWeights(**knobs(key_span=1))
    stored, seen = run_stream(policy)
    probe = LayerView(layer_idx=3, keys=torch.zeros(1, 1, 1), values=torch.zeros(1, 1, 1),
                      positions=torch.zeros(1), queries=None, budget=BUDGET, event=0, seed=7)
    keys = kernels.reservoir_log_priorities(torch.ones(seen - 1), 5, seed=probe.layer_seed(), ids=torch.arange(seen - 1))
    expected = torch.sort(torch.topk(keys, BUDGET - 1).indices).values
    assert torch.equal(stored[:-1], expected) and stored[-1] == seen - 1


def test_fresh_keys_compound_and_persistent_keys_do_not() -> None:
    early = lambda stored: int((stored < BUDGET).sum())  # noqa: E731 - tokens from before the first event
    fresh = sum(early(run_stream(FlatWeights(**knobs()), seed=s)[0]) for s in range(20))
    kept = sum(early(run_stream(FlatWeights(**knobs(key_span=1)), seed=s)[0]) for s in range(20))
    # Fresh: each event keeps a token with ~BUDGET/(BUDGET+CHUNK), 0.8**30 ~ 0.1% of 64 x 20 streams ~ 1.5 tokens.
    # Persistent: a token is kept iff it is in the top 63 of 544 seen, ~11.6% ~ 148 tokens.
    assert fresh < 15 and kept > 100


def test_key_span_shares_draws_within_a_span() -> None:
    policy = FlatWeights(**knobs(key_span=4))
    stored, _ = run_stream(policy)
    spans = stored[:-1] // 4
    # equal weights and one key per 4-token span: spans are kept whole except where the budget cuts one
    counts = torch.bincount(spans - spans.min())
    assert int(((counts > 0) & (counts < 4)).sum()) <= 2


def test_bad_knobs_are_one_sentence() -> None:
    for bad in ({"key_span": -1}, {"key_span": 1.5}, {"temper": 2.0}):
        with pytest.raises(NexusError):
            NexusReservoirPolicy(**bad)
