"""Tests of the CUDA paths (Triton compiled, in-place compaction, bf16 streams), skipped where no GPU is usable.

benchmarks/gpu_check.sh runs them on a GPU with TRITON_INTERPRET=0. NEXUS_CUDA_TESTS_DEVICE=cpu runs the same
bodies on CPU (torch kernels), which checks the tests' own logic on a machine without a GPU; it is not a CUDA test.
"""
from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture
def gpu() -> str:
    """The device these tests run on: "cuda", or the CPU stand-in named by NEXUS_CUDA_TESTS_DEVICE."""
    if os.environ.get("NEXUS_CUDA_TESTS_DEVICE") == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU (benchmarks/gpu_check.sh runs these on one)")
    if os.environ.get("TRITON_INTERPRET", "0") != "0":
        pytest.skip("TRITON_INTERPRET is set: run with TRITON_INTERPRET=0 so the compiled kernels are tested")
    return "cuda"

