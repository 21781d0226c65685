"""What must be shown #1: the scripted backend on a real git repository with a failing test. The agent edits,
runs the tests and submits; patch.diff applies cleanly to a fresh checkout, where the test then passes."""

import json
import subprocess

import pytest

from nexus.agent.examples import TEST_COMMAND
from nexus.agent.trajectory import load

from .conftest import SOLVING_SCRIPT, git, sandbox_kinds
from tests.conftest import LOCAL


@pytest.mark.parametrize("kind", sandbox_kinds())
def test_scripted_agent_fixes_the_failing_test(kind, calc_repo, write_script, cli, tmp_path, request):
    if kind == "docker":
        request.getfixturevalue("docker_ready")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(calc_repo.path), str(fresh))
    before = subprocess.run(TEST_COMMAND.split(), cwd=fresh, capture_output=True, text=True)
    assert before.returncode != 0, "the example must start with a failing test"

    out = tmp_path / "run"
    r = cli("solve", "--repo", calc_repo.path, "--issue", "add() returns a-b; make the tests pass",
              "--model", f"scripted:{write_script(SOLVING_SCRIPT)}", "--sandbox", kind, "-o", out)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "exit status   submitted" in r.stdout

    traj = load(out / "trajectory.json")
    assert traj["exit_status"] == "submitted" and traj["totals"]["steps"] == 5
    assert [s["action"] for s in traj["steps"]][-1] == "submit"
    test_runs = [s for s in traj["steps"] if s.get("action") == TEST_COMMAND]
    assert test_runs and test_runs[-1]["returncode"] == 0
    assert traj["runs"][0]["sandbox"] == kind
    # the trajectory's transcript is what the model saw: system, task, then assistant/observation turns
    roles = [m["role"] for m in traj["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles.count("assistant") == 5

    patch = (out / "patch.diff").read_text()
    assert "-    return a - b" in patch and "+    return a + b" in patch
    assert "nexus-file" not in patch and ".pyc" not in patch  # tools and bytecode stay out of the patch
    git(fresh, "apply", "--check", str(out / "patch.diff"))
    git(fresh, "apply", str(out / "patch.diff"))
    after = subprocess.run(TEST_COMMAND.split(), cwd=fresh, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr

    shown = cli("inspect", out)
    assert shown.returncode == 0, shown.stderr
    assert "submitted" in shown.stdout and "nexus-file str_replace calculator/ops.py" in shown.stdout
    assert "+    return a + b" in shown.stdout


def test_inspect_rejects_a_file_that_is_not_a_trajectory(cli, tmp_path):
    bogus = tmp_path / "x.json"
    bogus.write_text(json.dumps({"hello": 1}))
    r = cli("inspect", bogus)
    assert r.returncode == 2 and "is not a nexus trajectory" in r.stderr


def test_repo_given_as_a_git_url_is_cloned_and_the_clone_removed(calc_repo, write_script, cli, tmp_path):
    import glob
    import tempfile

    pattern = f"{tempfile.gettempdir()}/nexus-clone-*"
    before = set(glob.glob(pattern))
    out = tmp_path / "run"
    r = cli("solve", "--repo", f"file://{calc_repo.path}", "--issue", "fix add",
            "--model", f"scripted:{write_script(SOLVING_SCRIPT)}", "--sandbox", LOCAL, "-o", out)
    assert r.returncode == 0, r.stderr + r.stdout
    assert load(out)["task"]["commit"] == calc_repo.commit
    assert "+    return a + b" in (out / "patch.diff").read_text()
    assert set(glob.glob(pattern)) == before
