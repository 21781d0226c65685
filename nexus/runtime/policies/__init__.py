"""The eviction-policy registry: one small file per policy, all with the same budget accounting."""

from __future__ import annotations

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView
from nexus.runtime.policies.dense import DensePolicy
from nexus.runtime.policies.nexus import NexusPolicy
from nexus.runtime.policies.streaming_llm import StreamingLLMPolicy

REGISTRY: dict[str, type[EvictionPolicy]] = {
    cls.name: cls for cls in (DensePolicy, StreamingLLMPolicy, NexusPolicy)
}


def make_policy(name: str, **params) -> EvictionPolicy:
    """Build a registered policy; unknown names and bad parameters get one clear sentence."""
    if name not in REGISTRY:
        raise NexusError(f"Unknown policy {name!r}; registered policies: {', '.join(sorted(REGISTRY))}.")
    try:
        return REGISTRY[name](**params)
    except TypeError as exc:
        raise NexusError(f"Bad parameters for policy {name!r}: {exc}.") from exc


__all__ = ["REGISTRY", "EvictionPolicy", "LayerView", "make_policy"]
