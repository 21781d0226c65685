"""`create_sandbox`: pick Docker when an engine answers, else the local fallback with a one-line warning."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from nexus.sandbox.base import Sandbox, SandboxLimits
from nexus.sandbox.docker_sandbox import DockerSandbox
from nexus.sandbox.errors import SandboxError
from nexus.sandbox.local_sandbox import LocalSandbox
from nexus.sandbox.workspace import resolve_repo

KINDS = ("auto", "docker", "local", "local-unsafe")  # local-unsafe: no bubblewrap needed (no isolation)


def create_sandbox(
    kind: str = "auto",
    repo: str | Path | None = None,
    *,
    base_commit: str | None = None,
    image: str | None = None,
    task_id: str = "nexus",
    limits: SandboxLimits | None = None,
) -> Sandbox:
    """A sandbox (not yet started: use it as a context manager) with its own copy of `repo` at `base_commit`."""
    if kind not in KINDS and repo is None and Path(kind).expanduser().is_dir():
        kind, repo = "auto", kind  # create_sandbox("path/to/repo") reads naturally; allow it
    _require_known(kind)
    if repo is None:
        raise SandboxError("No repository given; pass repo=<path of a git checkout>.")
    resolve_repo(repo, base_commit)  # bad paths fail the same way whatever the kind
    if kind == "auto":
        kind, why = _pick(image)
        if kind == "local":
            print(f"nexus: {why}; using the local sandbox (bubblewrap; weaker isolation than docker).", file=sys.stderr)
    if kind == "docker":
        return DockerSandbox(repo, base_commit=base_commit, image=image, task_id=task_id, limits=limits)
    # "local" refuses to start where bubblewrap cannot run; "local-unsafe" runs without it, with a warning.
    return LocalSandbox(repo, base_commit=base_commit, task_id=task_id, limits=limits,
                        allow_unsafe=kind == "local-unsafe")


def _require_known(kind: str) -> None:
    if kind not in KINDS:
        raise SandboxError(f"Unknown sandbox kind {kind!r}; use one of {', '.join(KINDS)}.")


def check_kind(kind: str) -> None:
    """Refuse a sandbox kind that cannot start here, before anything else runs (a model load, an output dir)."""
    from nexus.sandbox.engine import engine_client
    from nexus.sandbox.local_sandbox import UNSAFE_REFUSAL, bwrap_usable

    _require_known(kind)
    if kind == "docker":
        engine_client(timeout=10).close()  # one sentence when no engine answers
    if kind == "local" and not bwrap_usable():
        raise SandboxError(UNSAFE_REFUSAL)


def _pick(image: str | None) -> tuple[str, str]:
    """("docker", "") when an engine answers and the image exists (or the base image can be built)."""
    from nexus.sandbox import images
    from nexus.sandbox.engine import engine_client, image_exists

    try:
        client = engine_client(timeout=10)
    except SandboxError:
        return "local", "no docker engine answers"
    try:
        if image is not None:
            if image_exists(client, image):
                return "docker", ""
            return "local", f"docker image {image} does not exist"
        if image_exists(client, images.BASE_IMAGE):
            return "docker", ""
        if shutil.which("debootstrap") and os.geteuid() == 0:
            images.ensure_base_image()
            return "docker", ""
        return "local", f"docker image {images.BASE_IMAGE} does not exist (build it: nexus sandbox build-base)"
    finally:
        client.close()


def can_isolate(image: str | None = None) -> bool:
    """Whether `auto` would find docker or a working bubblewrap here (what `local` needs)."""
    from nexus.sandbox.local_sandbox import bwrap_usable

    return _pick(image)[0] == "docker" or bwrap_usable()
