"""Open `--repo PATH|GIT_URL` at `--commit` with gitpython, or say in one sentence what is wrong."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from nexus.errors import NexusError

_URL = re.compile(r"^([a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)


@dataclass
class RepoSource:
    path: Path  # a local git repository the sandbox copies
    commit: str  # full sha of the base commit
    origin: str  # what the user passed
    temp_clone: Path | None = None  # removed by cleanup()

    def cleanup(self) -> None:
        if self.temp_clone is not None:
            shutil.rmtree(self.temp_clone, ignore_errors=True)
            self.temp_clone = None


def is_url(value: str) -> bool:
    return bool(_URL.match(value))


def open_repo(value: str, commit: str | None = None) -> RepoSource:
    value = (value or "").strip()
    if not value:
        raise NexusError("no repository given; pass --repo PATH or --repo GIT_URL.")
    if is_url(value):
        tmp = Path(tempfile.mkdtemp(prefix="nexus-clone-"))
        try:
            repo = git.Repo.clone_from(value, tmp / "repo")
        except git.GitCommandError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            detail = (e.stderr or "").strip().splitlines()
            raise NexusError(f"could not clone {value} ({detail[-1] if detail else 'git clone failed'}); "
                             "check the URL and the network, or clone it yourself and pass --repo PATH.") from None
        try:
            sha = _resolve(repo, commit, value)
        except NexusError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return RepoSource(Path(repo.working_dir), sha, value, temp_clone=tmp)
    path = Path(value).expanduser()
    if not path.exists():
        raise NexusError(f"repository path {path} does not exist; pass the path of a git checkout or a git URL.")
    if not path.is_dir():
        raise NexusError(f"repository path {path} is not a directory; pass the path of a git checkout.")
    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise NexusError(f"{path} is not a git repository; run `git init` and commit there, "
                         "or pass a git checkout.") from None
    if repo.bare:
        raise NexusError(f"{path} is a bare git repository; pass a checkout with a work tree.")
    sha = _resolve(repo, commit, str(path))
    return RepoSource(Path(repo.working_dir).resolve(), sha, value)


def commit_sha(repo: git.Repo, rev: str) -> str | None:
    """The full sha of commit `rev` (sha, branch, tag) if the repository has it, else None.

    rev-parse --verify, not repo.commit(): gitpython makes an object for any 40-hex string without looking it up.
    """
    try:
        return repo.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}")
    except git.GitCommandError:
        return None


def _resolve(repo: git.Repo, commit: str | None, where: str) -> str:
    rev = (commit or "HEAD").strip()
    sha = commit_sha(repo, rev)
    if sha is None:
        if rev == "HEAD":
            raise NexusError(f"repository {where} has no commit yet; commit the code first.")
        raise NexusError(f"commit {rev} is not in repository {where}; pass a commit sha, branch or tag "
                         "that `git log` shows there.")
    return sha
