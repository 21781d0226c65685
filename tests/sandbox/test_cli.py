"""`nexus sandbox` commands on a fresh typer app (the root CLI imports other layers)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from nexus.sandbox.cli import register
from tests.conftest import LOCAL


@pytest.fixture
def cli():
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["sandbox", *args])


def test_run_local_prints_output_diff_and_exit_code(cli, repo):
    res = cli("run", str(repo), "echo hi; echo new > f.txt; exit 4", "--sandbox", LOCAL, "--diff")
    assert res.exit_code == 4
    assert "hi" in res.output and "+++ b/f.txt" in res.output


def test_run_reports_timeout(cli, repo):
    res = cli("run", str(repo), "sleep 30", "--sandbox", LOCAL, "--timeout", "1")
    assert res.exit_code == 137 and "timed out after 1 s" in res.output


def test_bad_repo_is_one_line_error(cli, tmp_path):
    res = cli("run", str(tmp_path / "nope"), "ls", "--sandbox", "local")
    assert res.exit_code == 2  # user error: exit 2, as every command
    assert res.output.strip().startswith("error: Repository path") and res.output.count("\n") == 1


@pytest.mark.docker
def test_run_docker_and_gc(cli, repo, base_image):
    res = cli("run", str(repo), "whoami; pwd", "--sandbox", "docker")
    assert res.exit_code == 0 and res.output.split() == ["nexus", "/testbed"]
    res = cli("gc", "--task", "no-such-task-anywhere")
    assert res.exit_code == 0 and "removed 0 sandbox(es)" in res.output


def test_gc_removes_local_dirs_of_killed_processes(cli, repo):
    import subprocess
    import sys
    import uuid
    from pathlib import Path

    task = f"gc-{uuid.uuid4().hex[:8]}"
    script = (
        "import sys, time\n"
        "from nexus.sandbox.local_sandbox import LocalSandbox\n"
        # gc is under test, not isolation: where bubblewrap cannot run, the unconfined sandbox (as LOCAL picks)
        f"sb = LocalSandbox({str(repo)!r}, task_id={task!r}, allow_unsafe={LOCAL == 'local-unsafe'}); sb.start()\n"
        "print(sb.root, flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    root = Path(proc.stdout.readline().strip())
    assert root.is_dir()
    assert cli("gc", "--task", task).output.count(str(root)) == 0  # owner alive: kept
    proc.kill()
    proc.wait()
    res = cli("gc", "--task", task)
    assert str(root) in res.output and not root.exists()
