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
    def build_items(self, size: SuiteSize, tokenizer, seed: int, split: str = "all") -> list[Item]:
        """Deterministic given the seed and split (and the installed packages the texts come from); `split`
        ("all", "dev", "test", see corpus.split_packages) lets a study tune on dev and report on test."""

    @abstractmethod
    def observe(self, stream: InferenceStream, item: Item) -> Any:
        """Run the item through a fresh stream and return what `compare` needs (tensors allowed, kept in memory)."""

    def detail(self, item: Item, got: Any) -> dict | None:
        """Extra per-record data that is not a metric (e.g. survival curves); saved under the record's "detail"."""
        return None

    @abstractmethod
    def compare(self, item: Item, budget: int, ref: Any, got: Any) -> dict[str, float | list[float]]:
        """Per-item metrics of `got` judged against dense's `ref` on the same item; lists are per-point values."""
