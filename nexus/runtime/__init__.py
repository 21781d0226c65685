"""nexus.runtime: one continuous inference stream per task, its bounded KV cache, and eviction policies."""

from nexus.runtime.model_loading import load_model
from nexus.runtime.policies import REGISTRY, EvictionPolicy, LayerView, make_policy
from nexus.runtime.stats import StreamStats
from nexus.runtime.stream import Generation, InferenceStream

__all__ = ["load_model", "make_policy", "REGISTRY", "EvictionPolicy", "LayerView", "InferenceStream",
           "Generation", "StreamStats"]
