"""Torch reference for n-averaged Efraimidis-Spirakis reservoir keys (the Triton kernel must match it)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .philox import randint, uniform_open01


def reservoir_keys_ref(weights: Tensor, n: int, seed: int, offset: int = 0,
                       ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(priorities, log_priorities), both float32 [N].

    pi_j = (1/n) sum_i exp(log(u_ij) / w_j), u_ij from Philox counter offset + id_j*n + i, id_j = ids[j] (default j:
    an element's draws follow its index; given ids, they follow the element, wherever it sits). The log form is kept for
    ranking: exp(log u / w) underflows to 0 for tiny w, its log does not. w_j <= 0 -> pi 0, log pi -inf.
    """
    w = weights.to(torch.float32).reshape(-1)
    count = w.numel()
    j = torch.arange(count, device=w.device, dtype=torch.int64) if ids is None else ids.to(w.device, torch.int64)
    counters = offset + j[:, None] * n + torch.arange(n, device=w.device, dtype=torch.int64)[None, :]
    u = uniform_open01(randint(seed, counters))                      # [N, n] in (0, 1)
    positive = w > 0
    inv_w = 1.0 / torch.where(positive, w.clamp_min(1e-30), 1.0)   # floor keeps log u / w finite
    t = torch.log(u) * inv_w[:, None]                               # [N, n], <= 0, same op order as Triton
    pri = torch.exp(t).sum(1) / n
    log_pri = torch.logsumexp(t, dim=1) - math.log(n)
    zero = torch.zeros_like(pri)
    return torch.where(positive, pri, zero), torch.where(positive, log_pri, zero - math.inf)
