"""`streaming_llm`: attention sinks plus a recent window (Xiao et al., StreamingLLM). No scores needed."""

from __future__ import annotations

import torch

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView, sink_and_recent


class StreamingLLMPolicy(EvictionPolicy):
    name = "streaming_llm"

    def __init__(self, sinks: int = 4, **kwargs):
        super().__init__(**kwargs)
        if sinks < 0:
            raise NexusError(f"sinks must be >= 0, got {sinks}.")
        self.sinks = sinks

    def min_budget(self) -> int:
        return self.sinks + 1

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return sink_and_recent(stored, self.sinks, budget - self.sinks)

    def select(self, view: LayerView) -> torch.Tensor:
        return sink_and_recent(view.stored, self.sinks, view.budget - self.sinks)

    def describe(self) -> dict:
        return {**super().describe(), "sinks": self.sinks}
