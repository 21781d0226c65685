"""`ada_snapkv`: Ada-KV's head-adaptive budget allocation (Feng et al. 2024) on SnapKV scores.

A layer's scored budget is Hkv * K slots (K = budget - window - sinks per head, as for SnapKV). Every KV head first
gets the safeguard: its own top floor(alpha * K) tokens. The remaining slots go to the highest pooled scores over
all heads together (scores are attention probabilities, so they compare across heads): heads whose attention is
spread get more tokens, peaked heads fewer.

Memory is real: heads then keep different counts, and the cache stores them in a rectangular [Hkv, max_h k_h]
buffer whose unused slots carry a -inf logit bias (attention never sees them). `stats.cache_bytes` therefore
reports the padded bytes actually allocated, `stats.stored_bytes` the useful ones; the on-average budget
(sum over heads of kept tokens <= Hkv * budget) is the same as SnapKV's.
"""

from __future__ import annotations

import torch

from nexus.errors import NexusError
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.scoring import keep_rows
from nexus.runtime.policies.snapkv import SnapKVPolicy


def adaptive_counts(scores: torch.Tensor, k: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [H, L] (-inf = not a candidate). Returns (order [H, L] per-head descending, counts [H]) such that
    head h keeps order[h, :counts[h]], counts >= min(floor(alpha*k), candidates_h) and counts.sum() <= H * k."""
    h, length = scores.shape
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    ranked = scores.gather(1, order)  # [H, L] descending per head
    finite = torch.isfinite(ranked)
    guard = min(int(alpha * k), length)
    counts = finite[:, :guard].sum(dim=1)
    rest = ranked[:, guard:].masked_fill(~finite[:, guard:], float("-inf"))
    extra = h * k - int(counts.sum())
    if extra > 0 and rest.numel():
        flat = rest.flatten()
        take = torch.sort(flat, descending=True, stable=True).indices[: min(extra, int(torch.isfinite(flat).sum()))]
        # each head's extra tokens are a prefix of its own ranking, so counting per head is enough
        counts = counts + torch.bincount(take // rest.shape[1], minlength=h)
    return order, counts


class AdaSnapKVPolicy(SnapKVPolicy):
    name = "ada_snapkv"

    def __init__(self, alpha: float = 0.2, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= alpha <= 1:
            raise NexusError(f"alpha (safeguard fraction) must be in [0, 1], got {alpha}.")
        self.alpha = alpha

    def select(self, view: LayerView) -> torch.Tensor:
        forced = self.forced(view)
        scores = self.pooled_scores(view).masked_fill(forced, float("-inf"))
        order, counts = adaptive_counts(scores, view.budget - int(forced[0].sum()), self.alpha)
        ranks = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1]).expand_as(order))
        return keep_rows(forced | (ranks < counts[:, None]))

    def describe(self) -> dict:
        return {**super().describe(), "alpha": self.alpha}
