"""The bundled example task: examples/calculator (plain files) turned into a throw-away git repository."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import git

from nexus.agent.repo import RepoSource
from nexus.errors import NexusError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_REPO = EXAMPLES / "calculator"
EXAMPLE_ISSUE = EXAMPLES / "calculator-issue.md"
TEST_COMMAND = "python3 -m unittest discover -s tests -t ."


def make_example_repo(src: Path = EXAMPLE_REPO) -> RepoSource:
    """Copy the example into a temp dir, `git init` and commit it; cleanup() removes it."""
    if not src.is_dir():
        raise NexusError(f"the bundled example {src} is missing; run from a nexus checkout (pip install -e .).")
    tmp = Path(tempfile.mkdtemp(prefix="nexus-example-"))
    dest = tmp / src.name
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    repo = git.Repo.init(dest, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "nexus example")
        cw.set_value("user", "email", "example@nexus.invalid")
    repo.git.add(A=True)
    repo.index.commit("calculator example (add() is broken)")
    return RepoSource(dest, repo.head.commit.hexsha, f"example:{src.name}", temp_clone=tmp)
