"""`eval swebench stats` (counts by exit status / verdict, errors) and `merge-preds` (one predictions file from
several), on directories laid out as `run` and `grade` write them. Pure Python, through the real CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from nexus.errors import NexusError
from nexus.evals.swebench.io import write_json_atomic, write_text_atomic
from nexus.evals.swebench.predictions import Prediction, load_predictions, write_predictions
from nexus.evals.swebench.reports import make_run_report

A, B, C, D, E = (f"nexus-tasks__parse-{i}" for i in range(1, 6))
MODEL = "nexus__scripted__nexus__b1024__stream"


@pytest.fixture
def nexus():
    from nexus.cli import app

    def run(*args):
        r = CliRunner().invoke(app, [str(a) for a in args])
        return r, (str(r.exception) if isinstance(r.exception, NexusError) else None)

    return run


def agent_done(run, iid, exit_status, patch, error=None):
    record = {"prediction": Prediction(iid, MODEL, patch).to_row(), "exit_status": exit_status, "error": error,
              "totals": {}}
    write_json_atomic(run / "trajectories" / iid / "done.json", record)


def graded(grade_dir, iid, resolved):
    write_json_atomic(grade_dir / iid / "report.json", {iid: {"resolved": resolved, "nexus": {}}})


@pytest.fixture
def run_dir(tmp_path, shipped):
    """A run as `run` + `--grade` leave it: A resolved, B unresolved, C empty, D crashed, E killed mid-way."""
    run = tmp_path / "run"
    write_json_atomic(run / "run_config.json", {"model_name_or_path": MODEL})
    agent_done(run, A, "submitted", "diff a")
    agent_done(run, B, "step_limit", "diff b")
    agent_done(run, C, "format_errors", "")
    write_text_atomic(run / "trajectories" / D / "error.txt", "NexusError: the image is gone\n\ntraceback...")
    (run / "trajectories" / E).mkdir(parents=True)
    preds = {i: Prediction(i, MODEL, p) for i, p in ((A, "diff a"), (B, "diff b"), (C, ""))}
    write_predictions(run / "predictions.jsonl", preds.values())
    graded(run / "grade", A, True)
    graded(run / "grade", B, False)
    instances = [shipped[i] for i in (A, B, C)]
    write_json_atomic(run / "grade" / "run_report.json", make_run_report(instances, preds, run / "grade"))
    return run


def test_stats_groups_a_run_by_exit_status_and_verdict(nexus, run_dir):
    r, err = nexus("eval", "swebench", "stats", run_dir)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert f"({MODEL})" in out and "agent exit status (5 instances):" in out
    for status, iid in (("submitted", A), ("step_limit", B), ("format_errors", C), ("crashed", D),
                        ("unfinished", E)):
        assert any(line.split()[:3] == [status, "1", iid] for line in out.splitlines()), (status, out)
    assert "1/3 resolved (33.3%)" in out
    assert any(line.split()[:3] == ["resolved", "1", A] for line in out.splitlines())
    assert any(line.split()[:4] == ["empty", "patch", "1", C] for line in out.splitlines())
    assert f"agent: {D}: NexusError: the image is gone" in out

    r, _ = nexus("eval", "swebench", "stats", run_dir, "--json")
    stats = json.loads(r.stdout)
    assert stats["exit_status"]["crashed"] == [D] and stats["verdicts"]["resolved"] == [A]
    assert stats["verdicts"]["unresolved"] == [B] and stats["verdicts"]["error"] == []

    r, _ = nexus("eval", "swebench", "stats", run_dir, "--no-ids")
    assert A not in r.stdout and "resolved" in r.stdout


def test_stats_of_a_grade_directory_prints_each_error(nexus, tmp_path, shipped):
    out = tmp_path / "grade"
    preds = {i: Prediction(i, "gold", "diff") for i in (A, B)}
    graded(out, A, True)
    write_text_atomic(out / B / "error.txt", "Docker image x does not exist here; build it.\n\nattempt 1: ...")
    write_json_atomic(out / "run_report.json", make_run_report([shipped[A], shipped[B]], preds, out))
    r, _ = nexus("eval", "swebench", "stats", out)
    assert "agent exit status" not in r.stdout
    assert any(line.split()[:3] == ["error", "1", B] for line in r.stdout.splitlines())
    assert f"grade: {B}: Docker image x does not exist here; build it." in r.stdout


def test_stats_refuses_a_directory_that_is_no_run(nexus, tmp_path):
    r, err = nexus("eval", "swebench", "stats", tmp_path)
    assert err and "holds neither trajectories/ nor run_report.json" in err and "\n" not in err


def test_merge_preds_from_files_and_run_directories(nexus, tmp_path, run_dir):
    first = tmp_path / "first.jsonl"
    write_predictions(first, [Prediction(A, MODEL, "diff a"), Prediction("other-1", "m", "x")])
    swe_agent = tmp_path / "sweagent"
    swe_agent.mkdir()  # SWE-agent's preds.json: a dict keyed by instance id
    (swe_agent / "preds.json").write_text(json.dumps({"other-2": {"model_name_or_path": "m", "model_patch": "y"}}))
    merged = tmp_path / "merged" / "all.jsonl"
    r, err = nexus("eval", "swebench", "merge-preds", first, run_dir, swe_agent, "-o", merged)
    assert r.exit_code == 0, (r.output, err)
    assert "5 predictions from 3 inputs (1 identical duplicates dropped)" in r.stdout
    preds = load_predictions(merged)
    assert list(preds) == [A, "other-1", B, C, "other-2"] and preds[B].model_patch == "diff b"


def test_merge_preds_refuses_conflicting_duplicates(nexus, tmp_path, run_dir):
    other = tmp_path / "other.jsonl"
    write_predictions(other, [Prediction(A, MODEL, "another diff")])
    merged = tmp_path / "merged.jsonl"
    r, err = nexus("eval", "swebench", "merge-preds", run_dir, other, "-o", merged)
    assert err and f"1 instance id(s) have different predictions in two inputs ({A} in " in err
    assert "\n" not in err and not merged.exists()

    r, err = nexus("eval", "swebench", "merge-preds", other, "-o", tmp_path / "merged.json")
    assert err and "does not end in .jsonl" in err
    r, err = nexus("eval", "swebench", "merge-preds", tmp_path, "-o", merged)
    assert err and "holds no predictions.jsonl or preds.json" in err
    (tmp_path / "file").write_text("")
    r, err = nexus("eval", "swebench", "merge-preds", other, "-o", tmp_path / "file" / "m.jsonl")
    assert err and "Cannot write" in err
