"""What must be shown #3 (plumbing) and #4: `run` drives the real agent loop per instance in its own container
(a scripted backend stands in for the model here; the embedded-model run is in docs/swebench.md), writes
predictions the grader accepts, and a run killed mid-way resumes without redoing finished instances."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nexus.evals.swebench.predictions import load_predictions
from nexus.evals.swebench.runner import DONE, RunConfig, run

from .conftest import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FIX = ("sed -i 's/while curr is not root and time > curr.expires:/while curr is not root and not "
       "(time < curr.expires):/' src/cachetools/__init__.py")
SCRIPT = [f"Fix the boundary check.\n\n```bash\n{FIX} 2>&1; git status --short\n```",
          "Done.\n\n```bash\nsubmit\n```"]


def _remove_containers_of(pid: int) -> None:
    from nexus.sandbox.engine import engine_client

    client = engine_client()
    try:
        for c in client.containers.list(all=True, filters={"label": f"nexus.pid={pid}"}):
            c.remove(force=True, v=True)
    finally:
        client.close()


def _cli(*args: str) -> list[str]:
    code = "import sys; from nexus.evals.cli import eval_app; sys.exit(eval_app())"
    return [sys.executable, "-c", code, *args]


def test_killed_run_resumes_without_redoing_finished_instances(built, tmp_path):
    result, bcfg = built
    ids = ["nexus-tasks__cachetools-1", "nexus-tasks__toolz-3"]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / "run"
    args = ["swebench", "run", "--instances", str(bcfg.out), "--ids", ",".join(ids), "--model",
            f"scripted:{script}", "--policy", "dense", "--budget", "512", "--repos", str(bcfg.repos),
            "-o", str(out), "--no-grade", "--max-steps", "4"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(_cli(*args), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "trajectories" / ids[0] / DONE
    preds_file = out / "predictions.jsonl"

    def first_recorded() -> bool:
        # the DONE marker is written first, predictions.jsonl right after it: kill only once both are there
        return first.exists() and preds_file.exists() and ids[0] in preds_file.read_text()

    deadline = time.monotonic() + 240
    while not first_recorded() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run, mid-way through the second instance
    proc.wait()
    _remove_containers_of(proc.pid)  # SIGKILL leaves no chance to clean up; don't leak into the machine
    assert first.exists(), "the first instance did not finish in time"
    stamp = first.stat().st_mtime_ns
    assert not (out / "trajectories" / ids[1] / DONE).exists()
    assert list(load_predictions(out / "predictions.jsonl")) == [ids[0]]

    cfg = RunConfig(out_dir=out, model=f"scripted:{script}", policy="dense", budget=512, max_steps=4,
                    repos=bcfg.repos)
    insts = [i for i in result.instances if i.instance_id in ids]
    summary = run(sorted(insts, key=lambda i: ids.index(i.instance_id)), cfg, progress=False)
    assert summary["skipped_finished"] == 1 and summary["ran"] == 1
    assert first.stat().st_mtime_ns == stamp  # not redone
    preds = load_predictions(out / "predictions.jsonl")
    assert list(preds) == ids
    assert "not (time < curr.expires)" in preds[ids[0]].model_patch
    assert preds[ids[1]].model_patch == ""  # the sed has nothing to fix in toolz
    # the grader accepts the predictions: the scripted fix resolves cachetools-1, the empty one is empty
    assert summary["resolved"] == "1/2" and summary["empty_patches"] == 1
    traj = json.loads((out / "trajectories" / ids[0] / "trajectory.json").read_text())
    assert traj["exit_status"] == "submitted" and traj["task"]["image"].startswith("nexus-tasks-env/")


def test_the_same_runner_on_a_local_ray_instance(built, tmp_path):
    pytest.importorskip("ray")
    result, bcfg = built
    iid = "nexus-tasks__cachetools-1"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    cfg = RunConfig(out_dir=tmp_path / "ray-run", model=f"scripted:{script}", policy="dense", budget=512,
                    max_steps=4, repos=bcfg.repos, executor="ray")
    summary = run([i for i in result.instances if i.instance_id == iid], cfg, grade_after=False, progress=False)
    assert summary["ran"] == 1 and summary["outcomes"] == {"submitted": 1}
    preds = load_predictions(cfg.out_dir / "predictions.jsonl")
    assert "not (time < curr.expires)" in preds[iid].model_patch
