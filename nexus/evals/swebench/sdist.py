"""Pinned PyPI sdists: download with pip (the ordinary client), check the sha256, unpack without build junk."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from nexus.errors import NexusError
from nexus.evals.swebench.recipe import Library

# Compiled files some sdists ship by accident: not source, and they would differ between Python versions.
_JUNK_DIRS = {"__pycache__", ".pytest_cache"}
_JUNK_SUFFIXES = (".pyc", ".pyo")


def cache_dir() -> Path:
    return Path(os.environ.get("NEXUS_CACHE", Path.home() / ".cache" / "nexus")) / "sdists"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_sdist(lib: Library, cache: Path | None = None) -> Path:
    """The sdist archive of `lib` (cached), verified against the recipe's sha256."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for cand in cache.glob(f"{lib.name}-{lib.version}.*"):
        if sha256_of(cand) == lib.sha256:
            return cand
    with tempfile.TemporaryDirectory(prefix="nexus-sdist-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--dest", tmp, lib.requirement]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        files = [f for f in Path(tmp).iterdir() if f.name.endswith((".tar.gz", ".zip"))]
        if proc.returncode != 0 or not files:
            tail = proc.stdout.strip().splitlines()[-1:] or ["no output"]
            raise NexusError(f"pip could not download the sdist of {lib.requirement} ({tail[0][:200]}); "
                             "check that PyPI is reachable.")
        got = files[0]
        digest = sha256_of(got)
        if digest != lib.sha256:
            raise NexusError(f"The sdist of {lib.requirement} has sha256 {digest}, the recipe pins {lib.sha256}; "
                             "the download is not the pinned file: do not build from it.")
        dest = cache / got.name
        shutil.move(str(got), dest)
        return dest


def unpack_sdist(archive: Path, dest: Path) -> Path:
    """Unpack into `dest` (the sdist's top folder stripped); drop compiled files and caches."""
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory(prefix="nexus-unpack-") as tmp:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tmp)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data")  # no absolute paths, links out of the tree or devices
        tops = list(Path(tmp).iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else Path(tmp)
        shutil.copytree(root, dest, symlinks=True)
    for path in sorted(dest.rglob("*"), reverse=True):
        if path.is_dir() and path.name in _JUNK_DIRS:
            shutil.rmtree(path)
        elif path.is_file() and path.suffix in _JUNK_SUFFIXES:
            path.unlink()
    return dest
