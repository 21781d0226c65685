"""What must be shown #6: bad input gets one clear sentence (exit 2) and leaves nothing behind."""

import time

import pytest

from .conftest import SOLVING_SCRIPT, git
from tests.conftest import LOCAL


def _fails_cleanly(r, out, *needles):
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err  # one line
    assert "Traceback" not in r.stderr + r.stdout
    for needle in needles:
        assert needle in err, err
    assert not out.exists(), "a failed start must not create the output directory"


@pytest.fixture
def args(calc_repo, write_script, tmp_path):
    script = write_script(SOLVING_SCRIPT)
    return lambda **kw: ["solve", "--repo", kw.get("repo", calc_repo.path), "--issue", kw.get("issue", "fix add"),
                         "--model", f"scripted:{script}", "--sandbox", LOCAL, "-o", tmp_path / "out",
                         *kw.get("extra", [])]


def test_repo_path_that_does_not_exist(cli, args, tmp_path):
    _fails_cleanly(cli(*args(repo=tmp_path / "nope")), tmp_path / "out", "does not exist")


def test_directory_that_is_not_a_git_repo(cli, args, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("x = 1\n")
    _fails_cleanly(cli(*args(repo=plain)), tmp_path / "out", "is not a git repository")


def test_repo_without_commits(cli, args, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    _fails_cleanly(cli(*args(repo=empty)), tmp_path / "out", "has no commit yet")


@pytest.mark.parametrize("sha", ["0123456789abcdef0123", "0123456789abcdef0123456789abcdef01234567"])
def test_unknown_commit(cli, args, tmp_path, sha):
    # the full 40-hex form too: gitpython's repo.commit() accepts any such string without looking it up
    _fails_cleanly(cli(*args(extra=["--commit", sha])), tmp_path / "out", f"commit {sha} is not in repository")


def test_empty_issue_text_and_empty_issue_file(cli, args, tmp_path):
    _fails_cleanly(cli(*args(issue="   ")), tmp_path / "out", "the issue is empty")
    blank = tmp_path / "blank.md"
    blank.write_text("\n\n")
    _fails_cleanly(cli(*args(issue=str(blank))), tmp_path / "out", "is empty")


def test_unreadable_issue_files(cli, args, tmp_path):
    binary = tmp_path / "issue.txt"
    binary.write_bytes(b"\xff\xfe\x00bad\x81")
    _fails_cleanly(cli(*args(issue=str(binary))), tmp_path / "out", "is not UTF-8 text")
    folder = tmp_path / "issue_dir"
    folder.mkdir()
    _fails_cleanly(cli(*args(issue=str(folder))), tmp_path / "out", "is a directory")
    _fails_cleanly(cli(*args(issue=str(tmp_path / "missing.md"))), tmp_path / "out", "does not exist")


def test_github_issue_url_without_network_fails_fast(cli, args, tmp_path):
    t0 = time.monotonic()
    r = cli(*args(issue="https://github.com/octocat/hello-world/issues/1"))
    if r.returncode == 0:
        pytest.skip("the GitHub API is reachable from here")
    _fails_cleanly(r, tmp_path / "out", "octocat/hello-world#1", "--issue FILE")
    assert time.monotonic() - t0 < 30


def test_unknown_git_url_is_one_sentence_and_no_temp_clone_left(cli, args, tmp_path):
    _fails_cleanly(cli(*args(repo=f"file://{tmp_path}/no-such-repo.git")), tmp_path / "out", "could not clone")


def test_bad_script_and_existing_output_dir(cli, args, calc_repo, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = cli("solve", "--repo", calc_repo.path, "--issue", "x", "--model", f"scripted:{bad}", "--sandbox", LOCAL,
              "-o", tmp_path / "out")
    _fails_cleanly(r, tmp_path / "out", "cannot read script file")
    ok = cli(*args())
    assert ok.returncode == 0, ok.stderr
    again = cli(*args())
    assert again.returncode == 2 and "already holds a task" in again.stderr
    assert (tmp_path / "out" / "trajectory.json").exists()  # the first run's results are untouched


def test_resume_without_a_run(cli, tmp_path):
    (tmp_path / "out").mkdir()
    r = cli("solve", "--resume", "-o", tmp_path / "out")
    assert r.returncode == 2 and "no task to resume" in r.stderr
