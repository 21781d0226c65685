"""`h2o`: Heavy-Hitter Oracle (Zhang et al. 2023). Every stored token accumulates the attention it receives from every
query the stream ever runs (prefill and decode); a layer keeps a recent window plus, per KV head, the tokens with
the largest accumulated attention. Attention weights are recomputed by a stream hook from the post-RoPE queries and
keys the sdpa wrapper sees, so H2O needs no eager attention.
"""

from __future__ import annotations

import math

import torch

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView, StreamHook
from nexus.runtime.policies.scoring import forced_mask, top_rows

STATE = "h2o_score"  # [Hkv, S] accumulated attention per stored token and KV head


def chunk_attention(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """[Hkv, S]: attention of a chunk of queries [Hq, q, D] (the newest q tokens) on stored keys [Hkv, S, D],
    bottom-right causal, summed over the queries and averaged over each KV head's query heads."""
    hq, q, d = query.shape
    hkv, length, _ = keys.shape
    logits = torch.einsum("hgqd,hsd->hgqs", query.float().reshape(hkv, hq // hkv, q, d), keys.float()) / math.sqrt(d)
    if q > 1:
        rows = torch.arange(q, device=keys.device)[:, None] + (length - q)
        visible = torch.arange(length, device=keys.device)[None, :] <= rows
        logits = logits.masked_fill(~visible, float("-inf"))
    return torch.softmax(logits, dim=-1).sum(dim=2).mean(dim=1)


class H2OHook(StreamHook):
    def __init__(self, cache, dense_layers: int):
        self.cache = cache
        self.dense_layers = dense_layers

    def observe(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor) -> None:
        if layer_idx < self.dense_layers:
            return
        state = self.cache.layers[layer_idx].token_state
        acc = state.get(STATE)
        length = keys.shape[1]
        if acc is None:
            acc = torch.zeros(keys.shape[0], 0, device=keys.device)
        acc = torch.nn.functional.pad(acc, (0, length - acc.shape[1]))  # new tokens start at 0
        state[STATE] = acc + chunk_attention(query, keys)


class H2OPolicy(EvictionPolicy):
    name = "h2o"

    def __init__(self, recent_ratio: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        if not 0 < recent_ratio < 1:
            raise NexusError(f"recent_ratio must be in (0, 1), got {recent_ratio}.")
        self.recent_ratio = recent_ratio

    def min_budget(self) -> int:
        return 2

    def recent_count(self, budget: int) -> int:
        return max(1, min(budget - 1, int(budget * self.recent_ratio)))

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return torch.arange(max(0, stored - self.recent_count(budget)), stored)

    def make_hook(self, cache) -> StreamHook:
        return H2OHook(cache, self.dense_layers)

    def select(self, view: LayerView) -> torch.Tensor:
        acc = view.state.get(STATE)
        if acc is None:
            raise RuntimeError("h2o's accumulated scores are missing: the stream must run the policy's hook")
        acc = torch.nn.functional.pad(acc, (0, view.stored - acc.shape[1]))  # unobserved tokens accumulated 0
        recent = self.recent_count(view.budget)
        forced = forced_mask(view.positions, view.logit_bias, acc.shape[0], 0, recent)
        return top_rows(acc, view.budget - recent, forced)

    def describe(self) -> dict:
        return {**super().describe(), "recent_ratio": self.recent_ratio}
