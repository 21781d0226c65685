"""Philox4x32-10 in plain torch, bit-for-bit the generator behind Triton's `tl.randint`.

Triton's `randint(seed, offset)` runs Philox4x32-10 on the counter (offset_lo, offset_hi, 0, 0) with the key
(seed_lo, seed_hi) and returns the first output word. uint32 arithmetic is emulated in int64 tensors (values kept
in [0, 2**32)) because torch's uint32 dtype lacks most ops.
"""
from __future__ import annotations

import torch
from torch import Tensor

_MASK32 = 0xFFFFFFFF
_KEY_A = 0x9E3779B9  # golden ratio, Weyl key increment
_KEY_B = 0xBB67AE85
_ROUND_A = 0xD2511F53
_ROUND_B = 0xCD9E8D57


def _mulhilo(a: int, b: Tensor) -> tuple[Tensor, Tensor]:
    """(hi, lo) 32-bit words of a * b for a constant a < 2**32 and b in [0, 2**32), without int64 overflow."""
    b_hi = b >> 16
    b_lo = b & 0xFFFF
    lo_part = a * b_lo                      # < 2**48
    mid = a * b_hi + (lo_part >> 16)        # < 2**49
    hi = mid >> 16
    lo = ((mid & 0xFFFF) << 16) | (lo_part & 0xFFFF)
    return hi & _MASK32, lo & _MASK32


def philox4x32(c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor, k0: int, k1: int,
               n_rounds: int = 10) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox4x32 on int64 tensors holding uint32 values; key words are Python ints in [0, 2**32)."""
    c0, c1, c2, c3 = (c.to(torch.int64) & _MASK32 for c in (c0, c1, c2, c3))
    for _ in range(n_rounds):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + _KEY_A) & _MASK32
        k1 = (k1 + _KEY_B) & _MASK32
    return c0, c1, c2, c3


def randint(seed: int, offsets: Tensor) -> Tensor:
    """Same values as Triton's `tl.randint(seed, offsets)` for int64 offsets, as int64 in [0, 2**32)."""
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}")
    offsets = offsets.to(torch.int64)
    zero = torch.zeros_like(offsets)
    out, _, _, _ = philox4x32(offsets & _MASK32, (offsets >> 32) & _MASK32, zero, zero,
                              seed & _MASK32, (seed >> 32) & _MASK32)
    return out


def uniform_open01(bits: Tensor) -> Tensor:
    """uint32 -> float32 in (0, 1), never 0 or 1: the top 23 bits m give (m + 0.5) / 2**23, exact in float32."""
    return (((bits >> 9).to(torch.float32) + 0.5) * (2.0 ** -23)).to(torch.float32)
