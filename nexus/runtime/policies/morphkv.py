"""`morphkv`: MorphKV (Ghadia et al. 2025): a constant-size cache of the `recent` newest tokens plus the distant
tokens the recent window attends to most. Each recent query's attention over the distant tokens is its profile;
profiles are fused per distant token by `sum` or `max` over the window, per KV head (GQA: mean over its query
group), and each head keeps its top tokens. Meant for prefill+decode: it re-ranks every tau decode steps."""

from __future__ import annotations

import torch

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView, sink_and_recent
from nexus.runtime.policies.scoring import forced_mask, padded, top_rows, window_probs, window_scores

FUSIONS = ("sum", "max")


class MorphKVPolicy(EvictionPolicy):
    name = "morphkv"

    def __init__(self, recent: int = 32, fusion: str = "sum", sinks: int = 0, **kwargs):
        super().__init__(**kwargs)
        if recent < 1:
            raise NexusError(f"recent (window of recent tokens) must be >= 1, got {recent}.")
        if fusion not in FUSIONS:
            raise NexusError(f"Unknown fusion {fusion!r}; use one of {', '.join(FUSIONS)}.")
        if sinks < 0:
            raise NexusError(f"sinks must be >= 0, got {sinks}.")
        self.recent = recent
        self.window = recent  # the recent window's queries are the profile
        self.fusion = fusion
        self.sinks = sinks

    def min_budget(self) -> int:
        return self.sinks + self.recent + 1

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return sink_and_recent(stored, self.sinks, self.recent)

    def profile_scores(self, view: LayerView) -> torch.Tensor:
        """[Hkv, S] fused attention profile of the recent window; padded slots -inf."""
        q = view.queries[:, -min(self.recent, view.stored):]
        if self.fusion == "sum":
            scores = window_scores(q, view.keys, view.positions, view.logit_bias)
        else:
            scores = window_probs(q, view.keys, view.positions, view.logit_bias).max(dim=1).values
        scores = scores.float().cpu()
        return scores.masked_fill(padded(view.logit_bias, scores.shape), float("-inf"))

    def select(self, view: LayerView) -> torch.Tensor:
        forced = forced_mask(view.positions, view.logit_bias, view.keys.shape[0], self.sinks, self.recent)
        return top_rows(self.profile_scores(view), view.budget - int(forced[0].sum()), forced)

    def describe(self) -> dict:
        return {**super().describe(), "recent": self.recent, "fusion": self.fusion, "sinks": self.sinks}
