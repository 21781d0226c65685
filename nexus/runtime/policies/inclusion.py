"""Sampling designs with known inclusion probabilities pi, which is what a Hajek (1/pi) correction needs.

`inclusion_probs` sets pi proportional to a score (capped at 1); `systematic_sample` draws exactly sum(pi) units
with those probabilities (Madow's systematic PPS): one uniform start, units taken where the running sum of pi
crosses start + m. Why systematic rather than Poisson: the sample size is fixed, so a cache fills its budget exactly
instead of holding back a safety margin of a few standard deviations; and over units in stream order it spreads the
sample along the stream (implicit stratification by position).
"""

from __future__ import annotations

import torch


def inclusion_probs(scores: torch.Tensor, expected: float) -> torch.Tensor:
    """pi_i = min(1, c * s_i) with sum pi = expected (water-filling over the capped ones); s > 0."""
    n = scores.numel()
    if expected >= n:
        return torch.ones_like(scores)
    if expected <= 0:
        return torch.zeros_like(scores)
    s = scores.double()
    capped = torch.zeros(n, dtype=torch.bool)
    for _ in range(n):
        c = (expected - int(capped.sum())) / float(s[~capped].sum())
        new = (c * s >= 1.0) & ~capped
        if not bool(new.any()):
            break
        capped |= new
    pi = torch.where(capped, torch.ones_like(s), (c * s).clamp(max=1.0))
    return pi.to(scores.dtype)


def systematic_sample(pi: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Indices (ascending) of a systematic PPS sample: unit i is in it with probability pi_i; when sum(pi) is an
    integer k the sample has exactly k units. pi [n] in [0, 1]."""
    cum = torch.cumsum(pi.double().cpu(), 0)
    start = float(torch.rand((), generator=generator, dtype=torch.float64))
    # unit i is hit when an integer lies in [cum_{i-1} - start, cum_i - start): floor rises across it
    hits = torch.floor(cum - start + 1e-9)
    before = torch.floor(torch.cat([cum.new_zeros(1), cum[:-1]]) - start + 1e-9)  # the same up to unit i - 1
    return (hits > before).nonzero().flatten()
