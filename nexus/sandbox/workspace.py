"""The sandbox's own copy of a repository: a clone checked out at the base commit, plus the diff against it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from pathlib import Path
from typing import BinaryIO

from nexus.sandbox.errors import PatchTooLarge, SandboxError


def resolve_repo(repo: str | Path, base_commit: str | None) -> tuple[Path, str]:
    """Check the repository path and resolve `base_commit` (default HEAD) to a full sha."""
    path = Path(repo).expanduser()
    if not path.exists():
        raise SandboxError(f"Repository path {path} does not exist; pass the path of a git checkout.")
    if not path.is_dir():
        raise SandboxError(f"Repository path {path} is not a directory; pass the path of a git checkout.")
    top = _git(path, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise SandboxError(f"{path} is not a git repository; run `git init` and commit, or pass a checkout.")
    rev = base_commit or "HEAD"
    sha = _git(path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if sha.returncode != 0:
        what = "has no commit yet; commit something first" if rev == "HEAD" else f"has no commit {rev}"
        raise SandboxError(f"Repository {path} {what}.")
    return Path(top.stdout.strip()), sha.stdout.strip()


def clone_at(src: Path, dest: Path, commit: str) -> None:
    """A full, independent clone of `src` at `commit` (detached). No hardlinks: the copy may be chowned."""
    proc = subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", "--no-checkout", str(src), str(dest)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0:
        raise SandboxError(f"Could not copy repository {src}: {proc.stdout.strip()[:200]}")
    _git(dest, "checkout", "--quiet", "--detach", commit)
    _git(dest, "remote", "remove", "origin", check=False)
    # Commits made inside the sandbox need an identity; keep it local to the copy.
    _git(dest, "config", "user.name", "nexus")
    _git(dest, "config", "user.email", "nexus@localhost")


def diff_script(base_commit: str, max_bytes: int) -> str:
    """Shell that prints the diff of the work tree against `base_commit`, untracked (not ignored) files included,
    stopping after `max_bytes` + 1 bytes (one byte more than the limit tells the caller it was too large).

    A throw-away index keeps the user's own index (staged state) untouched.
    """
    return (
        "set -e; idx=$(mktemp); trap 'rm -f \"$idx\"' EXIT; "
        'cp .git/index "$idx" 2>/dev/null || true; '
        'export GIT_INDEX_FILE="$idx"; '
        "git -c safe.directory='*' add -A . >/dev/null; "
        f"git -c safe.directory='*' -c core.quotepath=off diff --cached --binary --no-color --no-ext-diff {base_commit}"
        f" | head -c {max_bytes + 1}; exit ${{PIPESTATUS[0]}}"
    )


def work_tree_diff(run, base_commit: str, max_diff_mb: int) -> str:
    """The diff, read through `run(script, timeout, cap)` (a sandbox's own runner) with memory bounded by the
    limit; a patch over it is refused whole (a cut patch would apply as something else, or not at all)."""
    limit = max_diff_mb << 20
    res = run(diff_script(base_commit, limit), 300, limit)
    if res.truncated:
        raise PatchTooLarge(
            f"The work tree's changes make a patch of more than {max_diff_mb} MB (SandboxLimits.max_diff_mb); "
            "delete large or generated files from the work tree (or raise the limit), then take the diff again."
        )
    if res.returncode != 0:
        raise SandboxError(f"git diff failed in the sandbox (exit {res.returncode}): {res.output[-300:]}")
    return res.output


def tar_directory(path: Path, fh: BinaryIO, *, uid: int, gid: int, arcname: str = ".") -> None:
    """Write `path` (a directory's contents, or one file) as a tar to `fh`, every entry owned by uid:gid."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    with tarfile.open(fileobj=fh, mode="w") as tar:
        tar.add(str(path), arcname=arcname, recursive=True, filter=owned)


def tree_digest(path: Path) -> str:
    """Content hash of a directory (paths, modes, bytes; .git excluded but its HEAD commit included)."""
    h = hashlib.sha256()
    head = _git(path, "rev-parse", "HEAD", check=False) if (path / ".git").exists() else None
    if head is not None and head.returncode == 0:
        h.update(b"HEAD " + head.stdout.strip().encode())
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files):
            p = Path(root) / name
            rel = p.relative_to(path).as_posix()
            st = p.lstat()
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            else:
                h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if check and proc.returncode != 0:
        raise SandboxError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()[:200]}")
    return proc
