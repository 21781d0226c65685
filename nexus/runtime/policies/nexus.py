"""`nexus`: Nexus Sampling (arXiv 2606.23961), as specified in shared/nexus-method.md.

Per layer and eviction event:
1. block distribution: the last W post-RoPE queries attend to all stored keys (per head softmax, heads averaged),
   probabilities summed per block of b tokens, each row normalized -> dist [W, blocks]; a = mean of the rows.
2. walk ("bridge" score), H steps: C += (1 + <a_q, C>) * a_q with a_q the row of window query (h mod W);
   c = C / ||C||_1. The (1 + <a_q, C>) factor boosts blocks that successive queries agree on.
3. weight w = a + lambda * c + eps * r, r a recency ramp (0 oldest .. 1 newest) that only breaks ties.
4. forced blocks (sinks at the start, a recency floor and the current partial block) are kept; the remaining
   budget K is filled by weighted reservoir sampling with n-averaged Efraimidis-Spirakis keys (n="det": top-K).
"""

from __future__ import annotations

import torch

from nexus import kernels
from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView


def walk_scores(dist: torch.Tensor, steps: int) -> torch.Tensor:
    """The H-step walk over the window's block distributions; returns c (sums to 1, or all zeros)."""
    w, nb = dist.shape
    acc = torch.zeros(nb, dtype=dist.dtype, device=dist.device)
    for h in range(steps):
        row = dist[h % w]
        acc = acc + (1.0 + torch.dot(row, acc)) * row
    total = acc.sum()
    return acc / total if total > 0 else acc


def block_weights(dist: torch.Tensor, steps: int, lam: float, eps: float) -> torch.Tensor:
    """w_j = a_j + lam * c_j + eps * r_j."""
    nb = dist.shape[1]
    a = dist.mean(dim=0)
    c = walk_scores(dist, steps)
    ramp = torch.linspace(0.0, 1.0, nb, dtype=dist.dtype, device=dist.device) if nb > 1 else torch.ones_like(a)
    return a + lam * c + eps * ramp


class NexusPolicy(EvictionPolicy):
    name = "nexus"
    # the paper's symbols: nexus(b=32, W=16, H=3, lam=0.5, n=5, tau=16); H=0 ablates the walk, n="det" is top-K
    aliases = {**EvictionPolicy.aliases, "b": "block_size", "W": "window", "H": "walk_steps", "λ": "lam",
               "lambda": "lam"}

    def __init__(
        self,
        block_size: int = 32,
        window: int = 16,
        walk_steps: int = 3,
        lam: float = 0.5,
        n: int | str = 5,
        eps: float = 1e-6,
        sink_blocks: int = 4,
        recent_blocks: int = 4,
        **kwargs,
    ):
        # dense_layers defaults to 0 here (the draft keeps 2 dense): in an unbounded stream a dense layer grows
        # without limit, which would break the fixed memory budget. Pass dense_layers=2 to reproduce the draft.
        super().__init__(**kwargs)
        if block_size < 1 or block_size & (block_size - 1):
            raise NexusError(f"block_size (b) must be a power of two, got {block_size}.")
        if window < 1:
            raise NexusError(f"window (W) must be >= 1, got {window}.")
        if walk_steps < 0:
            raise NexusError(f"walk_steps (H) must be >= 0, got {walk_steps}.")
        if lam < 0:
            raise NexusError(f"lam (lambda) must be >= 0, got {lam}.")
        if eps < 0:
            raise NexusError(f"eps must be >= 0, got {eps}.")
        if n != "det" and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise NexusError(f"n must be an integer >= 1 or 'det' (deterministic top-K), got {n!r}.")
        if sink_blocks < 0 or recent_blocks < 0:
            raise NexusError("sink_blocks and recent_blocks must be >= 0.")
        if recent_blocks * block_size < window:
            raise NexusError(
                f"recent_blocks * block_size ({recent_blocks * block_size}) must cover the window W={window}: "
                "the window's own tokens must stay in the cache."
            )
        self.block_size = block_size
        self.window = window
        self.walk_steps = walk_steps
        self.lam = lam
        self.n = n
        self.eps = eps
        self.sink_blocks = sink_blocks
        self.recent_blocks = recent_blocks

    def min_budget(self) -> int:
        # sinks + recency floor + the current partial block (at most b - 1 tokens), plus one scored block
        return (self.sink_blocks + self.recent_blocks + 1) * self.block_size + self.block_size - 1

    def forced_blocks(self, stored: int) -> torch.Tensor:
        b = self.block_size
        nb = -(-stored // b)
        full = stored // b
        forced = torch.zeros(nb, dtype=torch.bool)
        forced[: self.sink_blocks] = True
        forced[max(0, full - self.recent_blocks) : full] = True
        forced[full:] = True  # the partial block, if any
        return forced

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        token_block = torch.arange(stored) // self.block_size
        return self.forced_blocks(stored)[token_block].nonzero().flatten()

    def select(self, view: LayerView) -> torch.Tensor:
        b, stored = self.block_size, view.stored
        forced = self.forced_blocks(stored)
        sizes = torch.full((forced.numel(),), b)
        if stored % b:
            sizes[-1] = stored % b
        k = (view.budget - int(sizes[forced].sum())) // b
        candidates = (~forced).nonzero().flatten()
        if k >= candidates.numel():
            return torch.arange(stored)
        keep_blocks = forced.clone()
        if k > 0:
            weights = self.weights(view)[candidates.to(view.keys.device)].float()
            if self.n == "det":
                chosen = torch.topk(weights, k).indices
            else:
                chosen = kernels.reservoir_topk(weights, k, self.n, seed=view.rng_seed())
            keep_blocks[candidates[chosen.cpu()]] = True
        token_block = torch.arange(stored) // b
        return keep_blocks[token_block].nonzero().flatten()

    def weights(self, view: LayerView) -> torch.Tensor:
        dist, _ = kernels.window_block_scores(view.queries, view.keys, self.block_size)
        return block_weights(dist, self.walk_steps, self.lam, self.eps)

    def describe(self) -> dict:
        return {**super().describe(), "block_size": self.block_size, "window": self.window,
                "walk_steps": self.walk_steps, "lam": self.lam, "n": self.n, "eps": self.eps,
                "sink_blocks": self.sink_blocks, "recent_blocks": self.recent_blocks}
