"""Window attention scores shared by the attention-scored baselines (SnapKV family, MorphKV, TOVA, nexus_ht).

The stream records the last W post-RoPE queries per layer; these are the last W tokens, so query i of the window sits
at position (newest - W + 1 + i) and may see stored keys whose original position is <= its own. Causality is taken
from the stored positions (not the slot order), so it stays right after per-head keeps that left padded slots.
"""

from __future__ import annotations

import math

import torch

from nexus import kernels


def window_probs(queries: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor,
                 bias: torch.Tensor | None = None, causal: bool = True) -> torch.Tensor:
    """[Hkv, W, S]: per query-head softmax of the window queries over stored keys (+ additive bias, causal),
    averaged over the query heads of each KV head (GQA group). causal=False: every query sees every key (queries
    placed after the newest key, as nexus's task anchor is)."""
    hq, w, d = queries.shape
    hkv, length, _ = keys.shape
    group = hq // hkv
    q = queries.float().reshape(hkv, group, w, d)
    logits = torch.einsum("hgwd,hsd->hgws", q, keys.float()) / math.sqrt(d)
    if bias is not None:
        b = bias.float().to(keys.device)
        logits = logits + (b[:, None, None, :] if b.dim() == 2 else b[None, None, None, :])
    pos = positions.to(keys.device)
    pos = pos.expand(hkv, length) if pos.dim() == 1 else pos
    qpos = pos.max() - w + 1 + torch.arange(w, device=keys.device)
    visible = pos[:, None, :] <= qpos[None, :, None] if causal else torch.ones_like(pos, dtype=torch.bool)[:, None]
    logits = logits.masked_fill(~visible[:, None], float("-inf"))
    probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # a row that sees nothing is all zeros
    return probs.mean(dim=1)


def window_scores(queries: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """[Hkv, S]: attention each stored key received from the window, summed over the W rows."""
    if bias is None and positions.dim() == 1:
        # shared layout: slot order = position order, so the kernel's bottom-right causal mask is the same thing
        _, tok = kernels.window_block_scores(queries, keys, max(1, keys.shape[1]), token_scores=True)
        return tok
    return window_probs(queries, keys, positions, bias).sum(dim=1)


def padded(view_bias: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """[Hkv, S] bool: slots a per-head keep left unused (-inf bias); all False without a bias."""
    if view_bias is None:
        return torch.zeros(shape, dtype=torch.bool)
    return torch.isneginf(view_bias.cpu()).expand(shape)


def forced_mask(positions: torch.Tensor, bias: torch.Tensor | None, heads: int, sinks: int,
                recent: int) -> torch.Tensor:
    """[Hkv, S] bool: the sinks (positions < sinks) and the `recent` newest tokens of every head, by original
    position (after a per-head keep the newest tokens need not be the last slots), never a padded slot."""
    pos = positions.cpu()
    pos = pos.expand(heads, pos.shape[-1]) if pos.dim() == 1 else pos
    mask = (pos < sinks) | (pos > pos.max() - recent)
    return mask & ~padded(bias, pos.shape)


def keep_rows(keep: torch.Tensor) -> torch.Tensor:
    """[Hkv, S] bool -> [Hkv, max kept] LongTensor of kept slots, ascending per row, -1 after a row's last one."""
    heads, length = keep.shape
    slots = torch.arange(length).expand(heads, length)
    order = torch.sort(torch.where(keep, slots, slots + length), dim=1).values
    width = int(keep.sum(dim=1).max())
    rows = order[:, :width]
    return torch.where(rows < length, rows, -1)


def top_rows(scores: torch.Tensor, k: int, forced: torch.Tensor) -> torch.Tensor:
    """Each head keeps its forced slots plus its top-k other slots by `scores` [Hkv, S] (ties: the older slot;
    -inf scores are never picked)."""
    masked = scores.float().cpu().masked_fill(forced, float("-inf"))
    k = max(0, min(k, masked.shape[1]))
    top = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :k]
    chosen = torch.zeros_like(forced).scatter_(1, top, True) & torch.isfinite(masked)
    return keep_rows(forced | chosen)
