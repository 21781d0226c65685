"""Torch reference for compact_kv: gather the kept tokens of K and V into fresh contiguous tensors."""
from __future__ import annotations

from torch import Tensor


def check_compact(keys: Tensor, values: Tensor, keep: Tensor) -> None:
    if keys.dim() != 4 or values.dim() != 4 or keys.shape[:3] != values.shape[:3]:
        raise ValueError(f"keys/values must be [B, Hkv, L, D] with equal B, Hkv, L; got {tuple(keys.shape)} "
                         f"and {tuple(values.shape)}")
    if keep.dim() == 2 and keep.shape[0] != keys.shape[1]:
        raise ValueError(f"per-head keep must be [Hkv={keys.shape[1]}, K], got {tuple(keep.shape)}")
    if keep.dim() not in (1, 2):
        raise ValueError(f"keep must be [K] or [Hkv, K], got {tuple(keep.shape)}")


def compact_kv_ref(keys: Tensor, values: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    check_compact(keys, values, keep)
    keep = keep.to(device=keys.device).long()
    if keep.dim() == 1:
        return keys[:, :, keep].contiguous(), values[:, :, keep].contiguous()
    b, _, _, d = keys.shape
    idx_k = keep[None, :, :, None].expand(b, -1, -1, d)
    idx_v = keep[None, :, :, None].expand(b, -1, -1, values.shape[3])
    return keys.gather(2, idx_k).contiguous(), values.gather(2, idx_v).contiguous()
