"""Backend choice: CPU tensors use torch unless forced, triton is never imported on that path."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from nexus.kernels import backend, get_backend, set_backend


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NEXUS_KERNELS", "TRITON_INTERPRET")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_cpu_path_never_imports_triton() -> None:
    code = ("import sys, torch, nexus.kernels as K\n"
            "K.window_block_scores(torch.randn(4, 3, 8), torch.randn(2, 20, 8), 4, token_scores=True)\n"
            "K.compact_kv(torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8), torch.arange(3))\n"
            "K.reservoir_topk(torch.rand(10), 3, 5, 0)\n"
            "assert 'triton' not in sys.modules, 'triton imported'\n")
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr


def test_forced_triton_on_cpu_needs_the_interpreter() -> None:
    proc = _run("import torch, nexus.kernels as K\nK.reservoir_priorities(torch.rand(4), 2, 0)\n",
                NEXUS_KERNELS="triton", TRITON_INTERPRET="0")
    assert proc.returncode != 0 and "TRITON_INTERPRET=1" in proc.stderr


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="checks CPU dispatch under the interpreter")
def test_env_var_and_override(force_backend, monkeypatch: pytest.MonkeyPatch) -> None:
    backend._override = None
    monkeypatch.setenv("NEXUS_KERNELS", "torch")
    assert get_backend() == "torch" and not backend.use_triton(torch.zeros(1))
    monkeypatch.setenv("NEXUS_KERNELS", "triton")
    assert backend.use_triton(torch.zeros(1))          # the interpreter is on in this test session
    set_backend("auto")
    assert get_backend() == "auto" and not backend.use_triton(torch.zeros(1))
    monkeypatch.setenv("NEXUS_KERNELS", "cuda-please")
    backend._override = None
    with pytest.raises(ValueError):
        get_backend()
    with pytest.raises(ValueError):
        set_backend("fast")
