"""What must be shown #4: kill the process mid-task (SIGKILL, no cleanup); `--resume` continues from the last
saved step in a new sandbox with the saved patch re-applied, and the stream is rebuilt from the transcript."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nexus.agent.trajectory import load

from .conftest import ROOT
from tests.conftest import LOCAL

SCRIPT = [
    "```bash\necho before > notes.txt\n```",
    "```bash\necho step two\n```",
    "```bash\nsleep 4 && echo slept\n```",  # killed while this runs
    "```bash\necho after >> notes.txt\n```",
    "```bash\nsubmit\n```",
]


def _env(tmp_path: Path) -> dict:
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, NEXUS_HOME=str(tmp_path / "home"), PYTHONPATH=pythonpath, NO_COLOR="1")


def _steps_done(out: Path) -> int:
    try:
        return len(json.loads((out / "trajectory.json").read_text())["steps"])
    except (OSError, ValueError, KeyError):
        return 0


def kill_then_resume(model: str, calc_repo, tmp_path: Path, extra: list[str]) -> dict:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "nexus.cli", "solve", "--repo", str(calc_repo.path), "--issue", "write notes",
            "--model", model, "--sandbox", LOCAL, "-o", str(out), "--max-new-tokens", "16", *extra]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while _steps_done(out) < 2:
        assert proc.poll() is None, "the task ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.5)  # step 3's `sleep 4` is running now
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    crashed = load(out)
    assert crashed["exit_status"] is None  # nothing could record an exit: it was a hard kill
    assert len(crashed["steps"]) == 2

    r = subprocess.run([sys.executable, "-m", "nexus.cli", "solve", "--resume", "-o", str(out)], cwd=tmp_path,
                       env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    traj = load(out)
    assert traj["exit_status"] == "submitted"
    assert [s["step"] for s in traj["steps"]] == [1, 2, 3, 4, 5]  # no step lost, none repeated
    assert traj["steps"][2]["observation"] == "Output:\nslept\n\n[exit code 0]"
    assert [r["resumed"] for r in traj["runs"]] == [False, True] and traj["runs"][1]["from_step"] == 2
    patch = (out / "patch.diff").read_text()
    assert "+before" in patch and "+after" in patch  # work done before the kill survived into the new sandbox
    return traj


def test_kill_and_resume_with_the_scripted_backend(calc_repo, write_script, tmp_path):
    kill_then_resume(f"scripted:{write_script(SCRIPT)}", calc_repo, tmp_path, [])


@pytest.mark.slow
def test_kill_and_resume_rebuilds_the_real_stream(calc_repo, write_script, tmp_path):
    traj = kill_then_resume(f"replay:{write_script(SCRIPT)}", calc_repo, tmp_path, ["--budget", "512", "--chunk-size", "128"])
    rebuilt = [e for e in traj["events"] if e["event"] == "stream_rebuilt"]
    assert len(rebuilt) == 1 and rebuilt[0]["reason"] == "resume"
    # The kill lands in step 3's reply or its command; the first reply after the resume rebuilds the stream
    # from the whole transcript so far: system + task + (reply, observation) per finished step.
    at = rebuilt[0]["step"]
    assert at in (3, 4) and rebuilt[0]["messages"] == 2 + 2 * (at - 1)
    before, after = traj["steps"][at - 2]["stats"], traj["steps"][at - 1]["stats"]
    assert after["tokens_seen"] > before["tokens_seen"]  # the whole transcript went back into the new stream
    assert after["resets"] == 0  # rebuilt by appending into a fresh stream, not re-prefilled in place
