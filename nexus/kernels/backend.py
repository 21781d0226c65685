"""Which implementation a kernel call uses: the torch reference or the Triton kernel.

"auto" (default): CUDA tensors -> Triton, anything else -> torch. "torch" / "triton" force one. The env var
NEXUS_KERNELS sets the default; `set_backend` overrides it for this process. Triton is imported only when a Triton
kernel is actually chosen, so the rest of nexus never pays for (or breaks without) triton.
"""
from __future__ import annotations

import os

from torch import Tensor

BACKENDS = ("auto", "torch", "triton")
_override: str | None = None


def set_backend(name: str) -> None:
    """Force "torch" or "triton" for every kernel call, or go back to "auto"."""
    global _override
    if name not in BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; choose one of {', '.join(BACKENDS)}")
    _override = name


def get_backend() -> str:
    """The backend setting in force: set_backend's, else NEXUS_KERNELS, else "auto"."""
    if _override is not None:
        return _override
    name = os.environ.get("NEXUS_KERNELS", "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise ValueError(f"NEXUS_KERNELS={name!r} is not one of {', '.join(BACKENDS)}")
    return name


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def use_triton(*tensors: Tensor) -> bool:
    """True when this call should run the Triton kernel on these tensors."""
    name = get_backend()
    on_cuda = all(t.is_cuda for t in tensors)
    if name == "torch":
        return False
    if name == "auto":
        return on_cuda and triton_available()
    if not triton_available():
        raise RuntimeError("NEXUS_KERNELS=triton but triton cannot be imported")
    if not on_cuda and not _interpreting():
        raise RuntimeError("the triton backend on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported")
    return True


_triton_ok: bool | None = None


def triton_available() -> bool:
    global _triton_ok
    if _triton_ok is None:
        try:
            import triton  # noqa: F401
            _triton_ok = True
        except Exception:  # noqa: BLE001 - any import failure means "not usable here"
            _triton_ok = False
    return _triton_ok
