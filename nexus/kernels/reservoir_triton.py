"""Triton kernel for n-averaged Efraimidis-Spirakis reservoir keys (same Philox stream as reservoir_ref)."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _uniform(seed, counter):
    bits = tl.randint(seed, counter)                              # uint32, Philox4x32-10 word 0
    return ((bits >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)  # (m + 0.5) / 2**23: never 0 or 1


@triton.jit
def _reservoir_kernel(w_ptr, ids_ptr, pri_ptr, logpri_ptr, count, seed, offset, log_n,
                      N_DRAWS: tl.constexpr, BLOCK: tl.constexpr, HAS_IDS: tl.constexpr):
    j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = j < count
    w = tl.load(w_ptr + j, mask=inside, other=0.0).to(tl.float32)
    positive = w > 0
    inv_w = 1.0 / tl.where(positive, tl.maximum(w, 1e-30), 1.0)  # floor keeps log u / w finite
    element = tl.load(ids_ptr + j, mask=inside, other=0).to(tl.int64) if HAS_IDS else j.to(tl.int64)
    base = offset + element * N_DRAWS
    # Log key = logsumexp_i(log u_i / w). It is taken around max_i log u_i, not around the largest t_i = log u_i / w:
    # for tiny w, t is ~1e25 and the GPU compiler fuses t - max(t) into one FMA (t exact, max rounded), which
    # leaves a residual of ~1e17 and turns exp() into inf or 0 (seen on an H200). (log u_i - max) * (1/w) has no
    # add to fuse, and the term of the largest draw is exactly exp(0) = 1.
    log_u_max = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    for i in tl.static_range(N_DRAWS):
        log_u_max = tl.maximum(log_u_max, tl.log(_uniform(seed, base + i)))
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    rel_sum = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(N_DRAWS):
        log_u = tl.log(_uniform(seed, base + i))
        acc += tl.exp(log_u * inv_w)
        rel_sum += tl.exp((log_u - log_u_max) * inv_w)
    log_pri = log_u_max * inv_w + tl.log(rel_sum) - log_n
    pri = acc / N_DRAWS
    tl.store(pri_ptr + j, tl.where(positive, pri, 0.0), mask=inside)
    tl.store(logpri_ptr + j, tl.where(positive, log_pri, -float("inf")), mask=inside)


def reservoir_keys_triton(weights: Tensor, n: int, seed: int, offset: int = 0,
                          ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
    w = weights.reshape(-1).contiguous()
    id_buf = w if ids is None else ids.reshape(-1).to(w.device, torch.int64).contiguous()  # unread without ids
    count = w.numel()
    pri = torch.empty(count, device=w.device, dtype=torch.float32)
    log_pri = torch.empty_like(pri)
    if count == 0:
        return pri, log_pri
    block = 256 if count > 128 else max(16, triton.next_power_of_2(count))
    # seed/offset go in as int64 scalars so Philox sees the same 64-bit key and counters as the reference.
    _reservoir_kernel[(triton.cdiv(count, block),)](w, id_buf, pri, log_pri, count, seed, offset, math.log(n),
                                                    N_DRAWS=n, BLOCK=block, HAS_IDS=ids is not None)
    return pri, log_pri

