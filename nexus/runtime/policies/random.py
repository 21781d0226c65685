"""`random`: sinks + recent window, the rest filled by a uniform reservoir sample (the "no signal" floor)."""

from __future__ import annotations

import torch

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView, sink_and_recent


class RandomPolicy(EvictionPolicy):
    name = "random"

    def __init__(self, sinks: int = 4, recent: int = 32, **kwargs):
        super().__init__(**kwargs)
        if sinks < 0 or recent < 0:
            raise NexusError(f"sinks and recent must be >= 0, got sinks={sinks}, recent={recent}.")
        self.sinks = sinks
        self.recent = recent

    def min_budget(self) -> int:
        return self.sinks + self.recent + 1

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return sink_and_recent(stored, self.sinks, self.recent)

    def select(self, view: LayerView) -> torch.Tensor:
        forced = self.forced_tokens(view.stored, view.budget)
        others = torch.ones(view.stored, dtype=torch.bool)
        others[forced] = False
        candidates = others.nonzero().flatten()
        # a uniform k-subset (what a reservoir with equal weights gives), seeded per (stream, event, layer);
        # torch's generator, not the Philox reservoir kernel: with equal weights the keys carry no information
        gen = torch.Generator().manual_seed(view.rng_seed())
        chosen = torch.randperm(candidates.numel(), generator=gen)[: view.budget - forced.numel()]
        return torch.sort(torch.cat([forced, candidates[chosen]])).values

    def describe(self) -> dict:
        return {**super().describe(), "sinks": self.sinks, "recent": self.recent}
