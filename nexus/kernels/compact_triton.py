"""Triton compact_kv: gather the kept rows of K and V (any strides) in one launch.

Two kernels. `_gather_kernel` (grid: batch*head x chunks of kept rows) writes into storage that does not overlap
the input: fully parallel. `_inplace_kernel` compacts a buffer into itself: dest row k < source row keep[k], so
walking k upward in chunks, loading a whole chunk before storing it (with a CTA barrier between), never reads a row
that was already overwritten; parallelism comes from splitting batch*head and the head dimension only.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _gather_kernel(k_ptr, v_ptr, ko_ptr, vo_ptr, keep_ptr, n_heads, n_keep, keep_head_stride,
                   sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
                   ok_b, ok_h, ok_l, ok_d, ov_b, ov_h, ov_l, ov_d,
                   DK: tl.constexpr, DV: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(0)
    b = (bh // n_heads).to(tl.int64)
    g = (bh % n_heads).to(tl.int64)
    k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = k < n_keep
    idx = tl.load(keep_ptr + g * keep_head_stride + k, mask=row_ok, other=0).to(tl.int64)
    k64 = k.to(tl.int64)
    for d0 in tl.static_range(0, DK, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        ok = row_ok[:, None] & (d[None, :] < DK)
        x = tl.load(k_ptr + b * sk_b + g * sk_h + idx[:, None] * sk_l + d[None, :] * sk_d, mask=ok)
        tl.store(ko_ptr + b * ok_b + g * ok_h + k64[:, None] * ok_l + d[None, :] * ok_d, x, mask=ok)
    for d0 in tl.static_range(0, DV, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        ok = row_ok[:, None] & (d[None, :] < DV)
        x = tl.load(v_ptr + b * sv_b + g * sv_h + idx[:, None] * sv_l + d[None, :] * sv_d, mask=ok)
        tl.store(vo_ptr + b * ov_b + g * ov_h + k64[:, None] * ov_l + d[None, :] * ov_d, x, mask=ok)


@triton.jit
def _inplace_kernel(k_ptr, v_ptr, keep_ptr, n_heads, n_keep, keep_head_stride,
                    sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
                    DK: tl.constexpr, DV: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(0)
    b = (bh // n_heads).to(tl.int64)
    g = (bh % n_heads).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)   # this program's columns: disjoint from the others'
    k_base = k_ptr + b * sk_b + g * sk_h
    v_base = v_ptr + b * sv_b + g * sv_h
    for k0 in range(0, n_keep, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        row_ok = k < n_keep
        idx = tl.load(keep_ptr + g * keep_head_stride + k, mask=row_ok, other=0).to(tl.int64)
        k64 = k.to(tl.int64)
        ok_k = row_ok[:, None] & (d[None, :] < DK)
        ok_v = row_ok[:, None] & (d[None, :] < DV)
        xk = tl.load(k_base + idx[:, None] * sk_l + d[None, :] * sk_d, mask=ok_k)
        xv = tl.load(v_base + idx[:, None] * sv_l + d[None, :] * sv_d, mask=ok_v)
        tl.debug_barrier()  # every source row of this chunk is read before any of its dest rows is written
        tl.store(k_base + k64[:, None] * sk_l + d[None, :] * sk_d, xk, mask=ok_k)
        tl.store(v_base + k64[:, None] * sv_l + d[None, :] * sv_d, xv, mask=ok_v)
        # No barrier needed here: later chunks read only rows >= their own start, never rows stored so far.


def _block_d(*dims: int) -> int:
    return min(128, triton.next_power_of_2(max(dims)))


def gather_into(keys: Tensor, values: Tensor, keep: Tensor, k_out: Tensor, v_out: Tensor) -> None:
    """k_out/v_out [B, Hkv, K, D] (any strides) must not overlap keys/values."""
    b, hkv, _, dk = keys.shape
    dv = values.shape[3]
    n_keep = keep.shape[-1]
    if n_keep == 0 or b * hkv == 0:
        return
    head_stride = keep.stride(0) if keep.dim() == 2 else 0
    block_k = 32
    _gather_kernel[(b * hkv, triton.cdiv(n_keep, block_k))](
        keys, values, k_out, v_out, keep, hkv, n_keep, head_stride, *keys.stride(), *values.stride(),
        *k_out.stride(), *v_out.stride(), DK=dk, DV=dv, BLOCK_K=block_k, BLOCK_D=_block_d(dk, dv), num_warps=4)


def compact_in_place(k_buf: Tensor, v_buf: Tensor, keep: Tensor) -> None:
    """Rows keep[..., k] of each head move to row k of the same buffers; needs keep[..., k] >= k."""
    b, hkv, _, dk = k_buf.shape
    dv = v_buf.shape[3]
    n_keep = keep.shape[-1]
    if n_keep == 0 or b * hkv == 0:
        return
    head_stride = keep.stride(0) if keep.dim() == 2 else 0
    block_d = min(32, _block_d(dk, dv))
    _inplace_kernel[(b * hkv, triton.cdiv(max(dk, dv), block_d))](
        k_buf, v_buf, keep, hkv, n_keep, head_stride, *k_buf.stride(), *v_buf.stride(),
        DK=dk, DV=dv, BLOCK_K=64, BLOCK_D=block_d, num_warps=4,
        num_stages=1)  # no software pipelining: async prefetches would not be covered by the barrier


def compact_kv_triton(keys: Tensor, values: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    b, hkv, _, dk = keys.shape
    keep = keep.to(device=keys.device, dtype=torch.int64).contiguous()
    n_keep = keep.shape[-1]
    k_out = torch.empty(b, hkv, n_keep, dk, device=keys.device, dtype=keys.dtype)
    v_out = torch.empty(b, hkv, n_keep, values.shape[3], device=values.device, dtype=values.dtype)
    gather_into(keys, values, keep, k_out, v_out)
    return k_out, v_out
