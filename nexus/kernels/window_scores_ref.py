"""Torch reference for window_block_scores: the Triton kernel is tested against this, CPU runs use it."""
from __future__ import annotations

import math

import torch
from torch import Tensor


def check_shapes(queries: Tensor, keys: Tensor, block_size: int) -> tuple[int, int, int, int, int]:
    """(Hq, W, D, Hkv, L) after validating the contract shared by both implementations."""
    if queries.dim() != 3 or keys.dim() != 3:
        raise ValueError(f"queries must be [Hq, W, D] and keys [Hkv, L, D], got {tuple(queries.shape)} "
                         f"and {tuple(keys.shape)}")
    hq, w, d = queries.shape
    hkv, length, dk = keys.shape
    if d != dk:
        raise ValueError(f"head_dim differs: queries {d}, keys {dk}")
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of kv heads ({hkv})")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return hq, w, d, hkv, length


def window_block_scores_ref(queries: Tensor, keys: Tensor, block_size: int, *, causal_offset: int | None = None,
                            token_scores: bool = False, scale: float | None = None,
                            compute_dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor | None]:
    """Same contract as nexus.kernels.window_block_scores; materializes softmax for a few KV groups at a time."""
    hq, w, d, hkv, length = check_shapes(queries, keys, block_size)
    group = hq // hkv
    offset = length - w if causal_offset is None else causal_offset
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dev = queries.device
    q = queries.to(compute_dtype)
    k = keys.to(compute_dtype)
    rows = torch.arange(w, device=dev)[:, None]
    cols = torch.arange(length, device=dev)[None, :]
    visible = cols <= offset + rows                                        # [W, L]
    head_sum = torch.zeros(w, length, device=dev, dtype=compute_dtype)
    tok = torch.zeros(hkv, length, device=dev, dtype=compute_dtype) if token_scores else None
    # Several KV groups per batched matmul, but never more than ~16M scores at once (64 MB in fp32).
    step = max(1, (1 << 24) // max(1, group * w * length))
    for g0 in range(0, hkv, step):
        g1 = min(hkv, g0 + step)
        qg = q[g0 * group:g1 * group].reshape(g1 - g0, group * w, d)
        s = torch.bmm(qg, k[g0:g1].transpose(1, 2)).reshape(g1 - g0, group, w, length) * scale
        s = s.masked_fill(~visible, -math.inf)
        p = torch.softmax(s, dim=-1)
        p = torch.where(visible, p, torch.zeros((), device=dev, dtype=compute_dtype))  # rows seeing nothing: 0
        head_sum += p.sum((0, 1))
        if tok is not None:
            tok[g0:g1] = p.mean(1).sum(1)
    mean_p = head_sum / hq
    n_blocks = -(-length // block_size)
    padded = torch.nn.functional.pad(mean_p, (0, n_blocks * block_size - length))
    blocks = padded.reshape(w, n_blocks, block_size).sum(-1)
    total = blocks.sum(-1, keepdim=True)
    dist = torch.where(total > 0, blocks / torch.where(total > 0, total, 1.0), 0.0)
    out_dtype = torch.float64 if compute_dtype == torch.float64 else torch.float32
    return dist.to(out_dtype), (tok.to(out_dtype) if tok is not None else None)
