"""Kernel tests run the real Triton kernels: under the interpreter on CPU (CI), natively where CUDA is usable.

TRITON_INTERPRET must be set before triton decorates a kernel; nexus.kernels imports its Triton modules lazily,
so setting it here (at collection time) is early enough. Run with TRITON_INTERPRET=0 on a GPU machine to test the
compiled kernels on CUDA tensors instead.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from nexus.kernels import backend  # noqa: E402

ON_GPU = os.environ["TRITON_INTERPRET"] == "0" and torch.cuda.is_available()


@pytest.fixture
def device() -> str:
    return "cuda" if ON_GPU else "cpu"


@pytest.fixture
def force_backend() -> Iterator[callable]:
    """Call with "torch" or "triton"; the previous setting is restored afterwards."""
    saved = backend._override
    yield backend.set_backend
    backend._override = saved


@pytest.fixture
def score_tol() -> dict[str, float]:
    """Tolerance for probabilities from the Triton kernel vs the fp32 torch reference.

    Interpreter: numpy fp32 math, observed errors ~1e-7. GPU: tensor-core bf16 dots and exp2 approximations.
    """
    return {"atol": 2e-5, "rtol": 1e-4} if ON_GPU else {"atol": 1e-6, "rtol": 1e-5}
