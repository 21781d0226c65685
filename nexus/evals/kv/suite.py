"""What a quality suite is: items, one observation of an item on a stream, and a comparison against dense."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from nexus.evals.kv.config import SuiteSize
from nexus.runtime import InferenceStream


@dataclass
class Item:
    id: str
    context_tokens: int  # densities are fractions of this
    data: dict = field(default_factory=dict)  # JSON-serialisable: saved in items.json, so a resume reuses it


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    better: str  # "lower" | "higher"
    scale: float = 1.0  # for display (e.g. 100 for percentages)
    unit: str = ""


class QualitySuite(ABC):
    name: str = ""
    metrics: tuple[Metric, ...] = ()
    headline: str = ""  # the metric the quality-vs-density plot shows

    @abstractmethod
    def build_items(self, size: SuiteSize, tokenizer, seed: int) -> list[Item]:
        """Deterministic given the seed (and the installed packages the texts come from)."""

    @abstractmethod
    def observe(self, stream: InferenceStream, item: Item) -> Any:
        """Run the item through a fresh stream and return what `compare` needs (tensors allowed, kept in memory)."""

    @abstractmethod
    def compare(self, item: Item, budget: int, ref: Any, got: Any) -> dict[str, float | list[float]]:
        """Per-item metrics of `got` judged against dense's `ref` on the same item; lists are per-point values."""
