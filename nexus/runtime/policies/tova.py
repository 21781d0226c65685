"""`tova`: Token Omission Via Attention (Oren et al. 2024). The newest query's attention, averaged over all heads,
scores every stored token; the lowest-scored are evicted until the budget holds (one token per step in the paper,
the same set when several must go at once: keep the top `budget`). One kept set per layer, shared by the heads."""

from __future__ import annotations

import torch

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView, sink_and_recent
from nexus.runtime.policies.scoring import window_scores


class TOVAPolicy(EvictionPolicy):
    name = "tova"
    window = 1  # only the last query scores

    def __init__(self, sinks: int = 0, recent: int = 1, **kwargs):
        # TOVA forces nothing; recent=1 only guarantees the scoring token itself (which attends to itself anyway)
        super().__init__(**kwargs)
        if sinks < 0 or recent < 1:
            raise NexusError(f"tova needs sinks >= 0 and recent >= 1, got sinks={sinks}, recent={recent}.")
        self.sinks = sinks
        self.recent = recent

    def min_budget(self) -> int:
        return self.sinks + self.recent + 1

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return sink_and_recent(stored, self.sinks, self.recent)

    def scores(self, view: LayerView) -> torch.Tensor:
        """[S] the last query's attention probability per stored token, mean over all query heads."""
        # mean over KV heads of the per-group means = mean over all query heads (groups have equal size)
        return window_scores(view.queries[:, -1:], view.keys, view.positions, view.logit_bias).mean(dim=0)

    def select(self, view: LayerView) -> torch.Tensor:
        forced = self.forced_tokens(view.stored, view.budget)
        scores = self.scores(view).clone()
        scores[forced.to(scores.device)] = float("inf")
        keep = torch.sort(scores, descending=True, stable=True).indices[: view.budget]
        return torch.sort(keep.cpu()).values

    def describe(self) -> dict:
        return {**super().describe(), "sinks": self.sinks, "recent": self.recent}
