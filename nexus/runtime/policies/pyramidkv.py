"""`pyramidkv`: PyramidKV (Cai et al. 2024): SnapKV scoring with per-layer budgets shaped like a pyramid, more in low
layers (attention there is spread wide) and less in high ones (attention has funnelled onto few tokens).

Budgets follow the PyramidKV code: of each layer's budget the `window` (and any sinks) is fixed; the scored part
runs linearly from max = 2*s - s/beta at the first evicting layer to min = s/beta at the last (s = uniform scored
budget), rounded so the total over the evicting layers equals exactly what the uniform budget gives.
"""

from __future__ import annotations

from functools import lru_cache

from nexus.errors import NexusError
from nexus.runtime.policies.snapkv import SnapKVPolicy


@lru_cache(maxsize=64)
def pyramid(layers: int, scored: int, beta: float) -> tuple[int, ...]:
    """Integer scored budgets for `layers` layers, linear from high to low, summing to layers * scored."""
    if layers == 1:
        return (scored,)
    low = scored / beta
    high = 2 * scored - low
    step = (high - low) / (layers - 1)
    exact = [high - i * step for i in range(layers)]
    floors = [int(x) for x in exact]
    # largest-remainder rounding: the sum is exact, the shape stays monotone
    short = layers * scored - sum(floors)
    for i in sorted(range(layers), key=lambda i: (floors[i] - exact[i], i))[:short]:
        floors[i] += 1
    return tuple(floors)


class PyramidKVPolicy(SnapKVPolicy):
    name = "pyramidkv"

    def __init__(self, beta: float = 20.0, **kwargs):
        super().__init__(**kwargs)
        if beta < 1:
            raise NexusError(f"beta (top/bottom pyramid ratio control) must be >= 1, got {beta}.")
        self.beta = float(beta)

    def layer_budget(self, layer_idx: int, num_layers: int, budget: int) -> int:
        fixed = self.window + self.sinks
        evicting = num_layers - self.dense_layers
        if layer_idx < self.dense_layers or budget <= fixed or evicting < 1:
            return budget
        return fixed + pyramid(evicting, budget - fixed, self.beta)[layer_idx - self.dense_layers]

    def describe(self) -> dict:
        return {**super().describe(), "beta": self.beta}
