"""Images built without a registry: a debootstrap base (`docker import`) and per-repository environment images.

Both are cached by a content hash stored in the label `nexus.hash`: an image whose label matches the recipe is
reused, anything else is rebuilt. Environment images are tagged `nexus-env:<hash>`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nexus.sandbox.engine import engine_client, image_exists
from nexus.sandbox.errors import SandboxError
from nexus.sandbox.lifecycle import BUILD_LABEL, owner_labels
from nexus.sandbox.workspace import tar_directory, tree_digest

BASE_IMAGE = "nexus-base:bookworm"
SANDBOX_USER, SANDBOX_UID = "nexus", 1000
HASH_LABEL = "nexus.hash"

# Bump `recipe` when the build steps change so cached images are rebuilt.
BASE_RECIPE = {
    "recipe": 1,
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3", "python3-pip", "python3-venv", "git", "ca-certificates", "procps"],
    "user": [SANDBOX_USER, SANDBOX_UID],
}
# Debian's pip refuses system-wide installs (PEP 668); inside a throw-away container that is what we want.
_BASE_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
    'CMD ["/bin/bash"]',
]


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _label_of(client, name: str) -> str | None:
    labels = client.images.get(name).labels or {}
    return labels.get(HASH_LABEL)


def _log(msg: str) -> None:
    print(f"nexus sandbox: {msg}", file=sys.stderr, flush=True)


def ensure_base_image(
    name: str = BASE_IMAGE, *, from_image: str | None = None, rebuild: bool = False, mirror: str | None = None
) -> str:
    """Return `name`, building it first unless an image with the same recipe hash exists.

    Without `from_image` the root file system comes from debootstrap (about a minute, needs root and Debian
    mirrors); with it (e.g. `python:3.11-slim` where a registry is reachable) that image is used as the base and
    only the sandbox user is added.
    """
    client = engine_client()
    recipe = dict(BASE_RECIPE, from_image=from_image)
    want = _digest(recipe)
    if rebuild or not image_exists(client, name) or _label_of(client, name) != want:
        _build_base(client, name, want, from_image, mirror)
    # Also tag by content hash, so a later recipe change does not orphan the image under an unknown name.
    client.images.get(name).tag(name.partition(":")[0], want[:12])
    return name


def _build_base(client, name: str, want: str, from_image: str | None, mirror: str | None) -> None:
    if from_image:
        _base_from_image(client, name, from_image, want)
    else:
        _base_from_debootstrap(client, name, want, mirror)


def _base_from_debootstrap(client, name: str, digest: str, mirror: str | None) -> None:
    if shutil.which("debootstrap") is None:
        raise SandboxError(
            "debootstrap is not installed; run scripts/docker-engine (it installs it) or pass --base-image."
        )
    if os.geteuid() != 0:
        raise SandboxError("Building the base image with debootstrap needs root; rerun as root or pass --base-image.")
    repository, _, tag = name.partition(":")
    work = Path(tempfile.mkdtemp(prefix="nexus-base-", dir=os.environ.get("NEXUS_BUILD_DIR", "/var/tmp")))
    root, tarball = work / "rootfs", work / "rootfs.tar"
    t0 = time.monotonic()
    try:
        _log(f"building {name} with debootstrap (about a minute)")
        cmd = [
            "debootstrap",
            f"--variant={BASE_RECIPE['variant']}",
            "--include=" + ",".join(BASE_RECIPE["include"]),
            BASE_RECIPE["suite"],
            str(root),
        ] + ([mirror] if mirror else [])
        _check(cmd, "debootstrap failed (are the Debian mirrors reachable?)")
        # The sandbox user; apt caches and docs are not needed in a sandbox.
        _check(
            ["chroot", str(root), "useradd", "-m", "-u", str(SANDBOX_UID), "-s", "/bin/bash", SANDBOX_USER],
            "creating the sandbox user in the base image failed",
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(root / junk, ignore_errors=True)
        (root / "testbed").mkdir(exist_ok=True)
        os.chown(root / "testbed", SANDBOX_UID, SANDBOX_UID)
        _check(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tarball), "."], "packing the root fs failed")
        changes = _BASE_CHANGES + [f"LABEL {HASH_LABEL}={digest}"]
        client.api.import_image_from_file(str(tarball), repository=repository, tag=tag or "latest", changes=changes)
        _log(f"built {name} in {time.monotonic() - t0:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _base_from_image(client, name: str, from_image: str, digest: str) -> None:
    from docker.errors import APIError, ImageNotFound

    if not image_exists(client, from_image):
        try:
            _log(f"pulling {from_image}")
            client.images.pull(from_image)
        except (APIError, ImageNotFound) as e:
            raise SandboxError(
                f"Image {from_image} is not here and could not be pulled ({str(e)[:120]}); "
                "build the debootstrap base with `nexus sandbox build-base` instead."
            ) from None
    setup = (
        f"id -u {SANDBOX_USER} >/dev/null 2>&1 || useradd -m -u {SANDBOX_UID} -s /bin/bash {SANDBOX_USER} "
        f"|| adduser -D -u {SANDBOX_UID} {SANDBOX_USER} || true; mkdir -p /testbed; "
        f"chown {SANDBOX_UID}:{SANDBOX_UID} /testbed"
    )
    _commit_after(client, from_image, [setup], name, {HASH_LABEL: digest}, network=False)


def build_env_image(
    base: str, repo_dir_or_setup_script: str | Path, setup_commands: list[str], *, step_timeout_s: int = 1800
) -> str:
    """Layer a repository's install on `base` and return the tag `nexus-env:<hash>`.

    A directory is copied to /testbed (its .git included) and the commands run there as root with networking on
    (the only time a sandbox image sees the network). A file is taken as a setup script and run before the
    commands. The hash covers the base image id, the directory's contents (or the script) and the commands.
    """
    client = engine_client()
    if not image_exists(client, base):
        raise SandboxError(f"Base image {base} does not exist; build it with `nexus sandbox build-base`.")
    src = Path(repo_dir_or_setup_script).expanduser()
    if not src.exists():
        raise SandboxError(f"{src} does not exist; pass a repository directory or a setup script.")
    base_id = client.images.get(base).id
    content = tree_digest(src) if src.is_dir() else hashlib.sha256(src.read_bytes()).hexdigest()
    digest = _digest({"base": base_id, "content": content, "is_dir": src.is_dir(), "commands": setup_commands})
    tag = f"nexus-env:{digest[:16]}"
    if image_exists(client, tag) and _label_of(client, tag) == digest:
        return tag
    if src.is_dir():
        commands = list(setup_commands)
        upload = ("/testbed", src)
    else:
        commands = ["bash /tmp/nexus-setup.sh"] + list(setup_commands)
        upload = ("/tmp", src)
    labels = {HASH_LABEL: digest, "nexus.base": base}
    _commit_after(client, base, commands, tag, labels, network=True, upload=upload, step_timeout_s=step_timeout_s)
    return tag


def _commit_after(
    client,
    image: str,
    commands: list[str],
    target: str,
    labels: dict[str, str],
    *,
    network: bool,
    upload: tuple[str, Path] | None = None,
    step_timeout_s: int = 1800,
) -> None:
    """Run `commands` in a throw-away container from `image` and commit the result as `target`."""
    container = client.containers.create(
        image,
        command=["sleep", "infinity"],
        network_mode="bridge" if network else "none",
        labels={BUILD_LABEL: "1", **owner_labels("image-build")},
        working_dir="/testbed",
        user="0",
        init=True,
    )
    try:
        container.start()
        container.exec_run(["mkdir", "-p", "/testbed"], user="0")
        if upload is not None:
            dest, path = upload
            with tempfile.TemporaryFile() as fh:
                if path.is_dir():
                    tar_directory(path, fh, uid=0, gid=0)
                else:
                    tar_directory(path, fh, uid=0, gid=0, arcname="nexus-setup.sh")
                fh.seek(0)
                container.put_archive(dest, fh)
        for cmd in commands:
            # exec_run has no timeout of its own: a step that hangs (a prompt, a dead mirror) is killed here.
            argv = ["timeout", "-s", "KILL", str(step_timeout_s), "bash", "-lc", cmd]
            rc, out = container.exec_run(argv, user="0", workdir="/testbed")
            text = (out or b"").decode(errors="replace")
            if rc == 137:
                raise SandboxError(f"Image build step `{cmd}` was killed after {step_timeout_s} s (or ran out of memory).")
            if rc != 0:
                tail = text[-600:].strip().replace("\n", " | ")
                raise SandboxError(f"Image build step `{cmd}` failed with exit code {rc}: ...{tail}")
        repository, _, tag = target.partition(":")
        changes = [f"LABEL {k}={v}" for k, v in labels.items()] + ["WORKDIR /testbed"]
        container.commit(repository=repository, tag=tag or "latest", changes=changes)
    finally:
        container.remove(force=True, v=True)


def _check(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = proc.stdout[-400:].strip().replace("\n", " | ")
        raise SandboxError(f"{what}: {tail}")
