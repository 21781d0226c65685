"""`dense`: keep everything. The reference every other policy is judged against."""

from __future__ import annotations

import torch

from nexus.runtime.policies.base import EvictionPolicy, LayerView


class DensePolicy(EvictionPolicy):
    name = "dense"

    @property
    def evicts(self) -> bool:
        return False

    @property
    def evicts_during_decode(self) -> bool:
        return False  # dense never evicts, in either mode

    def select(self, view: LayerView) -> torch.Tensor:
        return torch.arange(view.stored)
