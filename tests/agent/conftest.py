"""Agent fixtures: the bundled calculator repo as a real git repository, scripts for the scripted backend, the
real `nexus` command in a subprocess (docker readiness lives in tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from nexus.agent.examples import TEST_COMMAND, make_example_repo
from tests.conftest import LOCAL

ROOT = Path(__file__).resolve().parents[2]

# A script that solves the calculator issue the way a model would: look, test, edit, test, submit.
SOLVING_SCRIPT = [
    "Let me look at the code.\n\n```bash\nls && nexus-file view calculator/ops.py 1 8\n```",
    f"Run the tests first.\n\n```bash\n{TEST_COMMAND} 2>&1 | tail -4\n```",
    "add() subtracts. Fix it.\n\n```bash\nnexus-file str_replace calculator/ops.py <<'EOF'\n"
    '    """Return the sum of a and b."""\n    return a - b\n=======\n'
    '    """Return the sum of a and b."""\n    return a + b\nEOF\n```',
    f"Check.\n\n```bash\n{TEST_COMMAND}\n```",
    "The tests pass.\n\n```bash\nsubmit\n```",
]


@pytest.fixture
def calc_repo():
    source = make_example_repo()
    yield source
    source.cleanup()


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[[list[str]], Path]:
    def write(replies: list[str], name: str = "script.json") -> Path:
        p = tmp_path / name
        p.write_text(json.dumps(replies))
        return p

    return write


@pytest.fixture
def nexus(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Run the real CLI (`python -m nexus.cli ...`) with its own NEXUS_HOME; returns the completed process."""

    def run(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
        pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, NEXUS_HOME=str(tmp_path / "home"), PYTHONPATH=pythonpath, NO_COLOR="1",
                   COLUMNS="200")
        return subprocess.run([sys.executable, "-m", "nexus.cli", *map(str, args)], cwd=cwd or tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)

    return run


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(tmp_path: Path, monkeypatch) -> Callable[..., CliResult]:
    """The real `nexus` typer app, invoked in-process (a subprocess pays the torch import every time)."""
    from typer.testing import CliRunner

    from nexus.cli import app

    monkeypatch.setenv("NEXUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(tmp_path)

    def run(*args: object) -> CliResult:
        r = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        return CliResult(r.exit_code, r.stdout, r.stderr)

    return run


def sandbox_kinds():
    return [pytest.param("docker", marks=pytest.mark.docker), LOCAL]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout


def tiny_stream(budget: int, chunk_size: int, policy: str = "nexus", layers: int = 2):
    """A real InferenceStream over a random-weight 2-layer model with the embedded tokenizer: real eviction, fast."""
    from transformers import AutoTokenizer

    from nexus.runtime import InferenceStream, make_policy
    from nexus.runtime.model_loading import embedded_model_dir
    from tests.conftest import tiny_model

    tok = AutoTokenizer.from_pretrained(embedded_model_dir())
    model = tiny_model("llama", len(tok), layers=layers)
    return InferenceStream(model, tok, make_policy(policy), budget=budget, chunk_size=chunk_size, seed=0)
