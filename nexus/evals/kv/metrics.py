"""Means with confidence intervals over items (percentile bootstrap, seeded, so reports are reproducible)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float  # 95% interval
    high: float
    n: int

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci95": [self.low, self.high], "n": self.n}

    def fmt(self, scale: float = 1.0, digits: int = 3) -> str:
        if self.n == 0 or math.isnan(self.mean):
            return "n/a"
        m, lo, hi = self.mean * scale, self.low * scale, self.high * scale
        small = 0 < max(abs(m), abs(lo), abs(hi)) < 10 ** -(digits - 1)
        spec = ".2e" if small else f".{digits}f"  # tiny KLs would all print as 0.000
        return f"{m:{spec}} [{lo:{spec}}, {hi:{spec}}]"


def bootstrap_mean(values, resamples: int = 2000, seed: int = 0) -> Estimate:
    """Mean and 95% percentile-bootstrap interval of the per-item values (items are the unit of resampling)."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    if x.size == 1 or np.all(x == x[0]):
        return Estimate(float(x.mean()), float(x.min()), float(x.max()), int(x.size))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Estimate(float(x.mean()), float(low), float(high), int(x.size))


def beyond_noise(a: Estimate, b: Estimate) -> bool:
    """True when the two 95% intervals do not overlap (a conservative 'the difference is real')."""
    return a.n > 0 and b.n > 0 and (a.low > b.high or b.low > a.high)
