"""Where an instance's repository comes from: a clone URL template (cloned once into the cache, fetched again when
the cache lacks the instance's base commit) or a local mirror; bad sources are one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.repos import find_repo
from nexus.sandbox.workspace import clone_at
from tests.conftest import git


def commit(work: Path, text: str) -> str:
    (work / "lib.py").write_text(text)
    git(work, "add", ".")
    git(work, "commit", "-qm", text)
    return git(work, "rev-parse", "HEAD")


def instance(base_commit: str) -> Instance:
    return Instance(instance_id="acme__lib-1", repo="acme/lib", base_commit=base_commit, problem_statement="x",
                    patch="", FAIL_TO_PASS=["t"], PASS_TO_PASS=[])


@pytest.fixture
def upstream(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(work checkout, bare 'server' repo at <tmp>/server/acme/lib.git); clones are cached under tmp."""
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    bare = tmp_path / "server" / "acme" / "lib.git"
    bare.parent.mkdir(parents=True)
    return work, bare


def test_clone_url_template_is_cloned_once_and_fetched_for_a_newer_commit(upstream, tmp_path):
    work, bare = upstream
    first = commit(work, "v1\n")
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    template = f"file://{tmp_path}/server/{{repo}}.git"

    cached = find_repo(instance(first), url_template=template)
    assert cached.is_relative_to(tmp_path / "cache")
    checkout = tmp_path / "checkout-1"
    clone_at(cached, checkout, first)
    assert (checkout / "lib.py").read_text() == "v1\n"

    # upstream moves on: the cached clone lacks the new base commit, so find_repo fetches it
    second = commit(work, "v2\n")
    git(work, "push", "-q", str(bare), "main")
    assert find_repo(instance(second), url_template=template) == cached
    checkout = tmp_path / "checkout-2"
    clone_at(cached, checkout, second)
    assert (checkout / "lib.py").read_text() == "v2\n"


def test_unknown_commit_and_unreachable_url_are_one_sentence(upstream, tmp_path):
    work, bare = upstream
    commit(work, "v1\n")
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    with pytest.raises(NexusError, match=r"Could not get acme/lib at 0{40} from file://.*; check the URL or use "):
        find_repo(instance("0" * 40), url_template=f"file://{tmp_path}/server/{{repo}}.git")
    with pytest.raises(NexusError, match=r"Could not get acme/lib at .* from file://.*/nowhere/acme/lib\.git"):
        find_repo(instance("1" * 40), url_template=f"file://{tmp_path}/nowhere/{{repo}}.git")


def test_mirror_directory_wins_and_a_missing_one_names_what_it_looked_for(upstream, tmp_path):
    work, _ = upstream
    sha = commit(work, "v1\n")
    mirror = tmp_path / "mirror"
    git(tmp_path, "clone", "-q", str(work), str(mirror / "acme__lib"))
    assert find_repo(instance(sha), mirror=mirror) == mirror / "acme__lib"
    with pytest.raises(NexusError, match=r"No repository for acme__lib-1 under .*empty \(looked for acme__lib-1, "
                                         r"acme__lib and lib\)"):
        find_repo(instance(sha), mirror=tmp_path / "empty")
