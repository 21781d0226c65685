"""The eviction-policy registry: one small file per policy, all with the same budget accounting."""

from __future__ import annotations

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView
from nexus.runtime.policies.ada_snapkv import AdaSnapKVPolicy
from nexus.runtime.policies.dense import DensePolicy
from nexus.runtime.policies.h2o import H2OPolicy
from nexus.runtime.policies.morphkv import MorphKVPolicy
from nexus.runtime.policies.nexus import NexusDraftPolicy, NexusPaperPolicy, NexusPolicy
from nexus.runtime.policies.nexus_ht import NexusHTPolicy
from nexus.runtime.policies.pyramidkv import PyramidKVPolicy
from nexus.runtime.policies.random import RandomPolicy
from nexus.runtime.policies.snapkv import SnapKVPolicy
from nexus.runtime.policies.streaming_llm import StreamingLLMPolicy
from nexus.runtime.policies.tova import TOVAPolicy

REGISTRY: dict[str, type[EvictionPolicy]] = {
    cls.name: cls
    for cls in (DensePolicy, RandomPolicy, StreamingLLMPolicy, H2OPolicy, TOVAPolicy, SnapKVPolicy, PyramidKVPolicy,
                AdaSnapKVPolicy, MorphKVPolicy, NexusPolicy, NexusPaperPolicy, NexusDraftPolicy, NexusHTPolicy)
}


def make_policy(name: str, **params) -> EvictionPolicy:
    """Build a registered policy; unknown names and bad parameters get one clear sentence."""
    if name not in REGISTRY:
        raise NexusError(f"Unknown policy {name!r}; registered policies: {', '.join(sorted(REGISTRY))}.")
    cls = REGISTRY[name]
    params = {cls.aliases.get(key, key): value for key, value in params.items()}
    try:
        return cls(**params)
    except TypeError as exc:
        raise NexusError(f"Bad parameters for policy {name!r}: {exc}.") from exc


__all__ = ["REGISTRY", "EvictionPolicy", "LayerView", "make_policy"]
