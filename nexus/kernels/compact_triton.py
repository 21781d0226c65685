"""Triton compact_kv: one launch gathers the kept rows of K and V (any input strides) into contiguous outputs.

Out of place on purpose: an in-place compaction moves every kept row towards the start of the buffer, and
parallel programs would read rows that other programs have already overwritten.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _gather_rows(src_ptr, dst_ptr, idx, k, row_ok, b, g, n_heads, n_keep, s_b, s_h, s_l, s_d,
                 D: tl.constexpr, BLOCK_D: tl.constexpr):
    src_row = src_ptr + b.to(tl.int64) * s_b + g * s_h + idx.to(tl.int64) * s_l
    dst_row = dst_ptr + ((b.to(tl.int64) * n_heads + g) * n_keep + k) * D
    for d0 in tl.static_range(0, D, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        ok = row_ok[:, None] & (d[None, :] < D)
        x = tl.load(src_row[:, None] + d[None, :] * s_d, mask=ok)
        tl.store(dst_row[:, None] + d[None, :], x, mask=ok)


@triton.jit
def _compact_kernel(k_ptr, v_ptr, ko_ptr, vo_ptr, keep_ptr, n_heads, n_keep, keep_head_stride,
                    sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
                    DK: tl.constexpr, DV: tl.constexpr, BLOCK_K: tl.constexpr,
                    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // n_heads
    g = bh % n_heads
    k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = k < n_keep
    idx = tl.load(keep_ptr + g * keep_head_stride + k, mask=row_ok, other=0)
    _gather_rows(k_ptr, ko_ptr, idx, k, row_ok, b, g, n_heads, n_keep, sk_b, sk_h, sk_l, sk_d, DK, BLOCK_DK)
    _gather_rows(v_ptr, vo_ptr, idx, k, row_ok, b, g, n_heads, n_keep, sv_b, sv_h, sv_l, sv_d, DV, BLOCK_DV)


def compact_kv_triton(keys: Tensor, values: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    b, hkv, _, dk = keys.shape
    dv = values.shape[3]
    keep = keep.to(device=keys.device, dtype=torch.int64).contiguous()
    n_keep = keep.shape[-1]
    head_stride = keep.stride(0) if keep.dim() == 2 else 0
    k_out = torch.empty(b, hkv, n_keep, dk, device=keys.device, dtype=keys.dtype)
    v_out = torch.empty(b, hkv, n_keep, dv, device=values.device, dtype=values.dtype)
    if n_keep == 0 or b * hkv == 0:
        return k_out, v_out
    block_k = 32

    def block_d(dim: int) -> int:
        return min(128, triton.next_power_of_2(dim))

    _compact_kernel[(b * hkv, triton.cdiv(n_keep, block_k))](
        keys, values, k_out, v_out, keep, hkv, n_keep, head_stride, *keys.stride(), *values.stride(),
        DK=dk, DV=dv, BLOCK_K=block_k, BLOCK_DK=block_d(dk), BLOCK_DV=block_d(dv), num_warps=4)
    return k_out, v_out
