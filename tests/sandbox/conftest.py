"""Sandbox fixtures: a real git repo in tmp, the real base image (built once, reused by its recipe hash), and a
factory that makes either kind of sandbox. Docker tests skip cleanly when no engine answers
(and fail under NEXUS_REQUIRE_ENGINES=1, as in CI)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from nexus.sandbox import SandboxLimits
from nexus.sandbox.docker_sandbox import DockerSandbox
from nexus.sandbox.local_sandbox import LocalSandbox, bwrap_usable
from tests.conftest import git, missing_engine

# "local" picks bubblewrap when it works; "local-plain" is the rlimits-only fallback of machines without it.
KINDS = [pytest.param("docker", marks=pytest.mark.docker), "local", "local-plain"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small real repository with two commits; `first` is tagged so tests can check out the older one."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "hello.py").write_text("print('hello')\n")
    (r / "README").write_text("first\n")
    (r / ".gitignore").write_text("*.log\n")
    git(r, "add", ".")
    git(r, "commit", "-qm", "first")
    git(r, "tag", "first")
    (r / "README").write_text("second\n")
    (r / "gone.txt").write_text("to be deleted\n")
    git(r, "add", ".")
    git(r, "commit", "-qm", "second")
    return r


@pytest.fixture(scope="session")
def base_image(docker_ready) -> str:
    return docker_ready


@pytest.fixture
def make_sandbox(request) -> Callable[..., object]:
    """make_sandbox(kind, repo, **kw) -> an unstarted sandbox; docker needs the engine and the base image."""

    def make(kind: str, repo: Path, limits: SandboxLimits | None = None, **kw):
        if kind == "docker":
            request.getfixturevalue("base_image")
            return DockerSandbox(repo, limits=limits, **kw)
        if kind == "local-bwrap":  # the confined local variant: skip where bubblewrap cannot run
            request.getfixturevalue("bwrap")
            return LocalSandbox(repo, limits=limits, use_bwrap=True, **kw)
        if kind == "local-plain":
            return LocalSandbox(repo, limits=limits, use_bwrap=False, **kw)
        # "local": bubblewrap where it works, else plain (that `local` refuses the fallback is test_limits's job)
        return LocalSandbox(repo, limits=limits, allow_unsafe=True, **kw)

    return make


@pytest.fixture(scope="session")
def bwrap() -> None:
    if not bwrap_usable():
        missing_engine("bubblewrap is missing or cannot create namespaces here (scripts/docker-engine installs it)")
