"""Git repositories for instances: deterministic one-commit repos (task builder) and where an instance's repo is.

A repository comes from a local mirror directory (`<dir>/<instance_id>`, `<dir>/<owner>__<name>` or
`<dir>/<name>`) or from a clone URL template such as `https://github.com/{repo}.git` (cloned once, cached).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import git

from nexus.agent.repo import commit_sha
from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance


def commit_tree(tree: Path, *, author: str, date: str, message: str) -> str:
    """Make `tree` a git repo with exactly one commit (fixed identity and dates: same tree, same sha)."""
    if (tree / ".git").exists():
        shutil.rmtree(tree / ".git")
    repo = git.Repo.init(tree, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("core", "autocrlf", "false")
        cw.set_value("core", "filemode", "true")
    name, _, email = author.partition(" <")
    env = {
        "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"), "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email.rstrip(">"), "GIT_COMMITTER_DATE": date,
    }
    # -f: sdists may contain files their own .gitignore excludes; the commit must hold the whole tree.
    repo.git.add("-A", "-f", ".")
    repo.git.commit("-q", "--no-gpg-sign", "--no-verify", "-m", message, env=env)
    return repo.head.commit.hexsha


def worktree_diff(tree: Path) -> str:
    """`git diff` of the work tree against HEAD, new (untracked) files included, standard a/ b/ prefixes."""
    repo = git.Repo(tree)
    untracked = repo.untracked_files
    if untracked:
        repo.git.add("--intent-to-add", "--", *untracked)
    try:
        text = repo.git.diff("HEAD", "--no-color", "--no-ext-diff", "--src-prefix=a/", "--dst-prefix=b/",
                             stdout_as_string=True, strip_newline_in_stdout=False)
    finally:
        if untracked:
            repo.git.reset("-q", "--", *untracked)
    return text


def reset_tree(tree: Path) -> None:
    repo = git.Repo(tree)
    repo.git.reset("-q", "--hard", "HEAD")
    repo.git.clean("-q", "-fdx")


def clone_cache() -> Path:
    return Path(os.environ.get("NEXUS_CACHE", Path.home() / ".cache" / "nexus")) / "repos"


def find_repo(instance: Instance, *, mirror: str | Path | None = None, url_template: str | None = None) -> Path:
    """A local git repository that contains `instance.base_commit`."""
    owner, _, name = instance.repo.partition("/")
    if mirror is not None:
        root = Path(mirror).expanduser()
        for cand in (root / instance.instance_id, root / f"{owner}__{name}", root / name):
            if (cand / ".git").exists() or (cand / "HEAD").exists():
                return cand
        if url_template is None:
            raise NexusError(
                f"No repository for {instance.instance_id} under {root} (looked for {instance.instance_id}, "
                f"{owner}__{name} and {name}); build it with `nexus eval swebench build-tasks` or pass --repo-url."
            )
    if url_template is None:
        raise NexusError(f"Instance {instance.instance_id} needs a repository: pass --repos DIR or --repo-url URL.")
    dest = clone_cache() / f"{owner}__{name}"
    url = url_template.format(repo=instance.repo, owner=owner, name=name)
    try:
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            git.Repo.clone_from(url, dest, no_checkout=True)
        repo = git.Repo(dest)
        if commit_sha(repo, instance.base_commit) is None:
            repo.remotes.origin.fetch()
            if commit_sha(repo, instance.base_commit) is None:
                raise ValueError("the commit is not in the repository, even after a fetch")
    except (git.GitCommandError, ValueError) as e:
        raise NexusError(f"Could not get {instance.repo} at {instance.base_commit} from {url} "
                         f"({str(e).strip().splitlines()[-1][:160]}); check the URL or use --repos.") from None
    return dest

