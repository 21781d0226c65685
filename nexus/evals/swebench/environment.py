"""Environment images for the bundled task set, built on the sandbox's debootstrap base without a registry.

Each library gets `nexus-tasks-env/<name>:<version>-py<python>-<inputs hash>`: a venv with the pinned test
dependencies on PATH (via /etc/profile.d, so `bash -lc` commands see it), a .pth that puts the repo's import root
on sys.path (the repo itself is copied to /testbed per run), and a system git excludes file so caches never show
up in diffs. The build is content-hash cached by `nexus.sandbox.images.build_env_image`; the logical tag is added
on top so that instances name an image that is the same on every machine. The tag's hash covers everything the
image is made from (base image recipe, setup script, pip requirements), so two recipes that would build
different images never share a tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.recipe import Environment, Library, Recipe, library_requirements

IMAGE_PREFIX = "nexus-tasks-env/"
VENV = "/opt/nexus-env"
_lock = threading.Lock()  # image builds from several worker threads must not race on the same tag


def image_inputs(lib: Library, env: Environment) -> dict:
    """Everything the environment image is made from. The library's version and tests are not here: the
    repository is copied in per run, so they do not change the image."""
    from nexus.sandbox.images import BASE_RECIPE

    return {"base": dict(BASE_RECIPE, from_image=None), "python": env.python,
            "pip": list(library_requirements(lib, env)), "setup": setup_script(lib, env)}


def image_name(lib: Library, env: Environment) -> str:
    """The readable part names the library; the hash of `image_inputs` tells images from different inputs apart."""
    digest = hashlib.sha256(json.dumps(image_inputs(lib, env), sort_keys=True).encode()).hexdigest()[:12]
    return f"{IMAGE_PREFIX}{lib.name}:{lib.version}-py{env.python.replace('.', '')}-{digest}"


def test_command(lib: Library, extra_test: str | None = None) -> str:
    """The eval's test command: the library's suite (plus a regression test file outside it), `-rA` so every
    test's status lands in the summary that swebench's pytest parser reads. A fixed hash seed keeps test ids
    stable: some suites parametrize from sets, and their ids would change from run to run."""
    paths = [lib.tests]
    if extra_test and not (extra_test + "/").startswith(lib.tests.rstrip("/") + "/"):
        paths.append(extra_test)
    return "PYTHONHASHSEED=0 python -m pytest -rA -p no:cacheprovider -W ignore::DeprecationWarning " + " ".join(paths)


def setup_script(lib: Library, env: Environment) -> str:
    pip = " ".join(shlex.quote(r) for r in library_requirements(lib, env))  # `pytest>=8` unquoted is a redirect
    install = (f"{VENV}/bin/pip install --no-cache-dir --disable-pip-version-check -q --no-index "
               f"--find-links /testbed/wheels {pip}") if pip else "# the recipe asks for no pip requirements"
    return f"""#!/bin/bash
set -euxo pipefail
export DEBIAN_FRONTEND=noninteractive
# `patch` is the grader's last fallback for applying a model patch.
apt-get update -qq && apt-get install -y -qq --no-install-recommends patch >/dev/null
rm -rf /var/lib/apt/lists/*
python3 -m venv {VENV}
# Wheels come from the host (pip download there): no TLS trust or index setup needed inside the image.
{install}
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


def _download_wheels(requirements: tuple[str, ...], dest: Path) -> None:
    if not requirements:
        return
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "--dest", str(dest),
           *requirements]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise NexusError(f"pip could not download {' '.join(requirements)} for the environment image "
                         f"({tail[:200]}); check the recipe's pip entries and that PyPI is reachable.")


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
            _download_wheels(library_requirements(lib, env), tmp / "wheels")
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
    """The image an instance runs in: its own `image` field when it exists here; a task-set image is built from
    `recipe` (default: the bundled one) when missing."""
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
    if not instance.image.startswith(IMAGE_PREFIX):
        raise NexusError(f"Docker image {instance.image} for {instance.instance_id} does not exist here and is not "
                         "a task-set image nexus can build; build or load it first.")
    from nexus.evals.swebench.recipe import load_recipe

    recipe = recipe or load_recipe()
    for lib in recipe.libraries.values():
        if image_name(lib, recipe.environment) == instance.image:
            return ensure_library_image(lib, recipe.environment)
    raise NexusError(f"Docker image {instance.image} for {instance.instance_id} does not exist here and no "
                     f"library of the recipe {recipe.path} builds it; pass --recipe with the recipe the instances "
                     "were built from, or build or load the image first.")
