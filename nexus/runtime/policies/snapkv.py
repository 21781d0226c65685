"""`snapkv`: SnapKV (Li et al. 2024). The last `window` queries (the observation window) score every older token:
attention summed over the window rows (softmax over all stored keys, causal inside the window), smoothed by a
1-D max or average pool of width `kernel` (stride 1, same length; avg counts the zero padding like F.avg_pool1d),
then each KV head keeps its own top-k older tokens (GQA: the mean over the head's query group). The window itself is
always kept. The paper applies it once after prefill ("prefill" mode); "prefill+decode" reapplies it every tau steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView, sink_and_recent
from nexus.runtime.policies.scoring import forced_mask, padded, top_rows, window_scores

POOLING = ("avgpool", "maxpool")


def pool_scores(scores: torch.Tensor, kernel: int, pooling: str) -> torch.Tensor:
    """[Hkv, L] -> [Hkv, L] pooled with a centred window of `kernel` (odd) tokens."""
    x = scores[:, None, :]
    if pooling == "avgpool":
        return F.avg_pool1d(x, kernel, stride=1, padding=kernel // 2)[:, 0]
    return F.max_pool1d(x, kernel, stride=1, padding=kernel // 2)[:, 0]


class SnapKVPolicy(EvictionPolicy):
    name = "snapkv"

    def __init__(self, window: int = 32, kernel: int = 5, pooling: str = "avgpool", sinks: int = 0,
                 mode: str = "prefill", **kwargs):
        super().__init__(mode=mode, **kwargs)
        if window < 1:
            raise NexusError(f"window (observation queries) must be >= 1, got {window}.")
        if kernel < 1 or kernel % 2 == 0:
            raise NexusError(f"kernel must be an odd pooling width >= 1, got {kernel}.")
        if pooling not in POOLING:
            raise NexusError(f"Unknown pooling {pooling!r}; use one of {', '.join(POOLING)}.")
        if sinks < 0:
            raise NexusError(f"sinks must be >= 0, got {sinks}.")
        self.window = window
        self.kernel = kernel
        self.pooling = pooling
        self.sinks = sinks

    def min_budget(self) -> int:
        return self.sinks + self.window + 1

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return sink_and_recent(stored, self.sinks, self.window)

    def forced(self, view: LayerView) -> torch.Tensor:
        return forced_mask(view.positions, view.logit_bias, view.keys.shape[0], self.sinks, self.window)

    def pooled_scores(self, view: LayerView) -> torch.Tensor:
        """[Hkv, S] pooled window attention of the older tokens; window slots +inf, padded slots -inf.

        Window and padded slots are zeroed before pooling: for a shared layout (window = the last slots) this is
        exactly SnapKV's pooling of the prefix with zero padding at its end."""
        w = min(self.window, view.stored)
        raw = window_scores(view.queries[:, -w:], view.keys, view.positions, view.logit_bias).float().cpu()
        pad = padded(view.logit_bias, raw.shape)
        window = forced_mask(view.positions, view.logit_bias, raw.shape[0], 0, w)
        pooled = pool_scores(raw.masked_fill(window | pad, 0.0), self.kernel, self.pooling)
        return pooled.masked_fill(window, float("inf")).masked_fill(pad, float("-inf"))

    def select(self, view: LayerView) -> torch.Tensor:
        forced = self.forced(view)
        return top_rows(self.pooled_scores(view), view.budget - int(forced[0].sum()), forced)

    def describe(self) -> dict:
        return {**super().describe(), "window": self.window, "kernel": self.kernel, "pooling": self.pooling,
                "sinks": self.sinks}
