"""nexus.runtime: one continuous inference stream per task, its bounded KV cache, and eviction policies.

Names are imported on first use (PEP 562), so `nexus --help` and argument errors do not pay for torch and
transformers.
"""

from importlib import import_module

_EXPORTS = {
    "load_model": "nexus.runtime.model_loading",
    "make_policy": "nexus.runtime.policies", "REGISTRY": "nexus.runtime.policies",
    "EvictionPolicy": "nexus.runtime.policies", "LayerView": "nexus.runtime.policies",
    "StreamStats": "nexus.runtime.stats",
    "InferenceStream": "nexus.runtime.stream", "Generation": "nexus.runtime.stream",
    "bounded": "nexus.runtime.bounded", "EvictingCache": "nexus.runtime.bounded",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nexus.runtime' has no attribute {name!r}")
