"""nexus.kernels: the eviction hot paths (window scoring, KV compaction, reservoir keys) behind one small API.

Each function dispatches per call: CUDA tensors -> Triton kernel, CPU tensors -> torch reference (see backend.py;
NEXUS_KERNELS=auto|torch|triton or set_backend() force one). Triton is imported only when a Triton kernel runs.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .backend import get_backend, set_backend, use_triton
from .compact_ref import check_compact, compact_kv_ref
from .reservoir_ref import reservoir_keys_ref
from .window_scores_ref import check_shapes, window_block_scores_ref

__all__ = ["window_block_scores", "compact_kv", "compact_kv_into", "reservoir_priorities", "reservoir_log_priorities",
           "reservoir_topk", "set_backend", "get_backend"]


def window_block_scores(queries: Tensor, keys: Tensor, block_size: int, *, causal_offset: int | None = None,
                        token_scores: bool = False, scale: float | None = None
                        ) -> tuple[Tensor, Tensor | None]:
    """queries [Hq, W, D] (post-RoPE), keys [Hkv, L, D]; Hq % Hkv == 0, query head h uses kv head h // (Hq//Hkv).

    Query row i may attend key j iff j <= causal_offset + i (default L - W: the window queries are the last W cached
    tokens). Scale default 1/sqrt(D). Per query head: softmax over visible keys; probabilities averaged over the Hq
    heads; summed per key block of `block_size` consecutive keys (last block may be partial); each row normalized
    to sum 1 (a row that sees no key is all zeros). Returns (block_dist [W, ceil(L/b)] float32, tok [Hkv, L] float32
    or None) where tok[g, j] = sum over window rows i of the mean over the query heads of group g of p_h[i, j].
    """
    hq, w, d, hkv, length = check_shapes(queries, keys, block_size)
    offset = length - w if causal_offset is None else int(causal_offset)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if use_triton(queries, keys):
        from .window_scores_triton import window_block_scores_triton
        return window_block_scores_triton(queries, keys, block_size, offset, scale, token_scores)
    return window_block_scores_ref(queries, keys, block_size, causal_offset=offset, token_scores=token_scores,
                                   scale=scale)


def compact_kv(keys: Tensor, values: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """keys/values [B, Hkv, L, D]; keep: LongTensor [K] (same tokens for all heads) or [Hkv, K] (per head), sorted
    ascending. Returns contiguous [B, Hkv, K, D] tensors of the kept tokens (fresh storage in this version)."""
    check_compact(keys, values, keep)
    if use_triton(keys, values):
        from .compact_triton import compact_kv_triton
        return compact_kv_triton(keys, values, keep)
    return compact_kv_ref(keys, values, keep)


def _span(t: Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] that tensor t can touch."""
    extent = sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1 if t.numel() else 0
    return t.data_ptr(), t.data_ptr() + extent * t.element_size()


def _overlap(a: Tensor, b: Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def _is_prefix_view(t: Tensor, buf: Tensor) -> bool:
    return t.data_ptr() == buf.data_ptr() and t.stride() == buf.stride()


def compact_kv_into(keys: Tensor, values: Tensor, keep: Tensor, k_buf: Tensor, v_buf: Tensor
                    ) -> tuple[Tensor, Tensor]:
    """Like compact_kv, but writes the kept rows into k_buf[:, :, :K] / v_buf[:, :, :K] and returns those views.

    k_buf/v_buf [B, Hkv, capacity >= K, D]. keys/values may be prefix views of the buffers (keys is
    k_buf[:, :, :L], the usual preallocated cache): then the compaction runs in place, without a temporary copy,
    when keep[..., k] >= k for every k (always true for strictly ascending keep); otherwise, or when the input
    overlaps the buffers in any other way, it goes through a temporary.
    """
    check_compact(keys, values, keep)
    n_keep = keep.shape[-1]
    if k_buf.dim() != 4 or k_buf.shape[:2] != keys.shape[:2] or k_buf.shape[3] != keys.shape[3] \
            or v_buf.dim() != 4 or v_buf.shape[:2] != values.shape[:2] or v_buf.shape[3] != values.shape[3] \
            or k_buf.shape[2] < n_keep or v_buf.shape[2] < n_keep:
        raise ValueError(f"buffers {tuple(k_buf.shape)} / {tuple(v_buf.shape)} cannot hold {n_keep} kept rows of "
                         f"{tuple(keys.shape)} / {tuple(values.shape)}")
    k_dst, v_dst = k_buf[:, :, :n_keep], v_buf[:, :, :n_keep]
    triton_path = use_triton(keys, values, k_buf, v_buf)
    overlap = _overlap(keys, k_buf) or _overlap(values, v_buf) or _overlap(keys, v_buf) or _overlap(values, k_buf)
    if triton_path:
        from .compact_triton import compact_in_place, gather_into
        keep_dev = keep.to(device=keys.device, dtype=torch.int64).contiguous()
        if not overlap:
            gather_into(keys, values, keep_dev, k_dst, v_dst)
            return k_dst, v_dst
        in_place = (_is_prefix_view(keys, k_buf) and _is_prefix_view(values, v_buf)
                    and not _overlap(keys, v_buf) and not _overlap(values, k_buf))
        if in_place and n_keep and bool((keep_dev >= torch.arange(n_keep, device=keep_dev.device)).all()):
            compact_in_place(k_buf, v_buf, keep_dev)
            return k_dst, v_dst
    k_new, v_new = compact_kv(keys, values, keep)  # a temporary: safe for any overlap
    k_dst.copy_(k_new)
    v_dst.copy_(v_new)
    return k_dst, v_dst


def _reservoir_keys(weights: Tensor, n: int, seed: int, offset: int,
                    ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= seed < 2**63 or offset < 0:
        raise ValueError(f"seed must be in [0, 2**63) and offset >= 0, got seed={seed}, offset={offset}")
    if ids is not None and (ids.shape != weights.reshape(-1).shape or (ids.numel() and int(ids.min()) < 0)):
        raise ValueError(f"ids must be one non-negative id per weight, got shape {tuple(ids.shape)} for "
                         f"{weights.numel()} weights")
    if use_triton(weights):
        from .reservoir_triton import reservoir_keys_triton
        return reservoir_keys_triton(weights, n, seed, offset, ids)
    return reservoir_keys_ref(weights, n, seed, offset, ids)


def reservoir_priorities(weights: Tensor, n: int, seed: int, offset: int = 0, ids: Tensor | None = None) -> Tensor:
    """weights [N] >= 0 float. Returns float32 priorities pi_j = (1/n) * sum_{i<n} u_ij ** (1/w_j), u_ij ~ U(0,1)
    from a counter-based Philox stream keyed by (seed, offset + j*n + i) (reproducible, identical uniforms on CPU
    reference and Triton). w_j <= 0 -> priority 0. Computed as exp(log u / w); for tiny w this underflows to 0,
    use reservoir_log_priorities to rank such weights. `ids` (LongTensor [N]) replaces j in the counter, so an
    element keeps its uniforms wherever it sits in `weights` (persistent keys across eviction events)."""
    return _reservoir_keys(weights, n, seed, offset, ids)[0]


def reservoir_log_priorities(weights: Tensor, n: int, seed: int, offset: int = 0,
                             ids: Tensor | None = None) -> Tensor:
    """log of reservoir_priorities, computed without underflow (logsumexp); -inf where w_j <= 0."""
    return _reservoir_keys(weights, n, seed, offset, ids)[1]


def reservoir_topk(weights: Tensor, k: int, n: int, seed: int, offset: int = 0,
                   ids: Tensor | None = None) -> Tensor:
    """Indices (LongTensor, sorted ascending) of the k largest reservoir priorities (k >= N -> all indices).

    Ranked by log priority, so weights whose priority underflows still rank among themselves; ties (only possible
    among zero weights) go to the lower index."""
    count = weights.numel()
    if k >= count:
        return torch.arange(count, device=weights.device)
    if k <= 0:
        return torch.empty(0, dtype=torch.long, device=weights.device)
    log_pri = reservoir_log_priorities(weights, n, seed, offset, ids)
    order = torch.sort(log_pri, descending=True, stable=True).indices[:k]
    return torch.sort(order).values
