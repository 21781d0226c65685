"""Environment images for the bundled task set, built on the sandbox's debootstrap base without a registry.

Each library gets `nexus-tasks-env/<name>:<version>`: a venv with the pinned test dependencies on PATH (via
/etc/profile.d, so `bash -lc` commands see it), a .pth that puts the repo's import root on sys.path (the repo
itself is copied to /testbed per run), and a system git excludes file so caches never show up in diffs. The
build is content-hash cached by `nexus.sandbox.images.build_env_image`; the logical tag is added on top so that
instances name an image that is the same on every machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.recipe import Environment, Library, Recipe

IMAGE_PREFIX = "nexus-tasks-env/"
VENV = "/opt/nexus-env"
_lock = threading.Lock()  # image builds from several worker threads must not race on the same tag


def image_name(lib: Library, env: Environment) -> str:
    return f"{IMAGE_PREFIX}{lib.name}:{lib.version}-py{env.python.replace('.', '')}"


def test_command(lib: Library, extra_test: str | None = None) -> str:
    """The eval's test command: the library's suite (plus a regression test file outside it), `-rA` so every
    test's status lands in the summary that swebench's pytest parser reads. A fixed hash seed keeps test ids
    stable: some suites parametrize from sets, and their ids would change from run to run."""
    paths = [lib.tests]
    if extra_test and not (extra_test + "/").startswith(lib.tests.rstrip("/") + "/"):
        paths.append(extra_test)
    return "PYTHONHASHSEED=0 python -m pytest -rA -p no:cacheprovider -W ignore::DeprecationWarning " + " ".join(paths)


def setup_script(lib: Library, env: Environment) -> str:
    pip = " ".join(env.pip)
    return f"""#!/bin/bash
set -euxo pipefail
export DEBIAN_FRONTEND=noninteractive
# `patch` is the grader's last fallback for applying a model patch.
apt-get update -qq && apt-get install -y -qq --no-install-recommends patch >/dev/null
rm -rf /var/lib/apt/lists/*
python3 -m venv {VENV}
# Wheels come from the host (pip download there): no TLS trust or index setup needed inside the image.
{VENV}/bin/pip install --no-cache-dir --disable-pip-version-check -q --no-index --find-links /testbed/wheels {pip}
site=$({VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo /testbed/{lib.import_root.strip('./') or ''} | sed 's#/$##' > "$site/nexus-testbed.pth"
cat > /etc/profile.d/nexus-env.sh <<'EOF'
export PATH={VENV}/bin:$PATH
export PYTHONDONTWRITEBYTECODE=1
EOF
printf '__pycache__/\\n*.pyc\\n.pytest_cache/\\n' > /etc/nexus-gitignore
git config --system core.excludesFile /etc/nexus-gitignore
git config --system safe.directory '*'
# The sandbox copies the repository into /testbed per run: leave it empty here.
find /testbed -mindepth 1 -delete
"""


def _cache() -> Path:
    return Path(os.environ.get("NEXUS_CACHE", Path.home() / ".cache" / "nexus"))


def _download_wheels(env: Environment, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "--dest", str(dest),
           *env.pip]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise NexusError(f"pip could not download {' '.join(env.pip)} for the environment image ({tail[:200]}); "
                         "check that PyPI is reachable.")


def ensure_library_image(lib: Library, env: Environment, *, build_dir: Path | None = None) -> str:
    """Build (or reuse) the environment image of `lib` and return its logical tag."""
    from nexus.sandbox.engine import engine_client, image_exists
    from nexus.sandbox.images import ensure_base_image, build_env_image

    name = image_name(lib, env)
    script = setup_script(lib, env)
    with _lock:
        base = ensure_base_image()
        root = build_dir or _cache() / "env-context"
        ctx = root / f"{lib.name}-{hashlib.sha256(script.encode()).hexdigest()[:12]}"
        if not (ctx / "setup.sh").exists():
            tmp = root / f".{ctx.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "wheels").mkdir(parents=True)
            _download_wheels(env, tmp / "wheels")
            (tmp / "setup.sh").write_text(script)
            shutil.rmtree(ctx, ignore_errors=True)
            os.replace(tmp, ctx)
        tag = build_env_image(base, ctx, ["bash /testbed/setup.sh"])
        client = engine_client()
        try:
            if not image_exists(client, name) or client.images.get(name).id != client.images.get(tag).id:
                repository, _, t = name.partition(":")
                client.images.get(tag).tag(repository, t)
        finally:
            client.close()
    return name


def ensure_instance_image(instance: Instance, recipe: Recipe | None = None) -> str:
    """The image an instance runs in: its own `image` field when it exists here; a bundled task-set image is
    built from the recipe when missing."""
    from nexus.sandbox.engine import engine_client, image_exists

    if not instance.image:
        raise NexusError(f"Instance {instance.instance_id} names no environment image; add an `image` field "
                         "(SWE-bench's own images need their registry, which is not reachable here).")
    client = engine_client()
    try:
        if image_exists(client, instance.image):
            return instance.image
    finally:
        client.close()
    if instance.image.startswith(IMAGE_PREFIX):
        from nexus.evals.swebench.recipe import load_recipe

        recipe = recipe or load_recipe()
        for lib in recipe.libraries.values():
            if image_name(lib, recipe.environment) == instance.image:
                return ensure_library_image(lib, recipe.environment)
    raise NexusError(f"Docker image {instance.image} for {instance.instance_id} does not exist here and cannot "
                     "be built from the task recipe; build or load it first.")
