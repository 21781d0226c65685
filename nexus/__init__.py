"""nexus: a runtime for memory-bounded coding agents (one continuous KV-cache stream per task).

`nexus.bounded(model, policy, budget)` keeps a Hugging Face model's KV cache within a budget under unchanged
`model.generate` / pipeline code (nexus/runtime/bounded.py). It is imported on first use (PEP 562), so `import nexus`
does not pay for torch and transformers.
"""

__version__ = "0.1.0"

_EXPORTS = {"bounded": "nexus.runtime.bounded"}
__all__ = ["bounded", "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        from importlib import import_module

        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nexus' has no attribute {name!r}")
