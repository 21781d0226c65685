"""Counters a stream keeps about itself; every number is measured, none estimated."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StreamStats:
    budget: int = 0  # tokens per evicting layer after an eviction event
    tokens_seen: int = 0  # everything appended or generated since the last reset
    tokens_stored: int = 0  # max over layers of tokens now in the cache
    cache_bytes: int = 0  # bytes allocated for K/V now (all layers)
    stored_bytes: int = 0  # bytes holding stored tokens now (<= cache_bytes)
    peak_cache_bytes: int = 0
    anchor_bytes: int = 0  # bytes of recorded task-anchor queries (nexus anchor_tokens), held beside the K/V
    peak_tokens_stored: int = 0
    eviction_events: int = 0
    tokens_evicted: int = 0  # summed over events of (max stored before - max stored after)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    forward_seconds: float = 0.0
    eviction_seconds: float = 0.0
    resets: int = 0  # full cache rebuilds (0 for a never-re-prefilled stream)
    policy: dict = field(default_factory=dict)
    certificate: dict | None = None  # set by policies that certify their eviction error

    def as_dict(self) -> dict:
        return asdict(self)
