"""User mistakes at the CLI: one sentence naming the problem (NexusError: the root CLI prints it, exits 2), and
nothing written. In-process, through the real `nexus` typer app."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from nexus.errors import NexusError


@pytest.fixture
def nexus(monkeypatch, tmp_path):
    from nexus.cli import app

    monkeypatch.chdir(tmp_path)

    def run(*args):
        r = CliRunner().invoke(app, [str(a) for a in args])
        return r, (str(r.exception) if isinstance(r.exception, NexusError) else None)

    return run


def test_missing_and_invalid_instance_files(nexus, tmp_path):
    r, err = nexus("eval", "swebench", "grade", "--instances", tmp_path / "nope.jsonl", "--predictions", "gold",
                   "-o", tmp_path / "out")
    assert err and "does not exist" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instance_id": "x-1", "repo": "o/n"}) + "\n")
    r, err = nexus("eval", "swebench", "grade", "--instances", bad, "--predictions", "gold", "-o", tmp_path / "out")
    assert err and "No valid instances" in err
    assert "skipped: x-1: field base_commit: is missing" in r.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_protocol_is_refused_before_anything_is_written(nexus, tmp_path):
    r, err = nexus("eval", "swebench", "run", "--ids", "nexus-tasks__parse-1", "--protocol", "weird",
                   "-o", tmp_path / "run")
    assert err and "Unknown cache protocol 'weird'" in err
    assert not (tmp_path / "run").exists()


def test_a_custom_recipe_needs_out(nexus, tmp_path):
    from nexus.evals.cli import DEFAULT_INSTANCES

    before = DEFAULT_INSTANCES.read_bytes()
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("libraries: {}\n")
    r, err = nexus("eval", "swebench", "build-tasks", "--recipe", recipe)
    assert err and "--recipe needs --out" in err and "\n" not in err
    assert DEFAULT_INSTANCES.read_bytes() == before


def test_predictions_for_unknown_instances_are_refused(nexus, tmp_path, shipped):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "nexus-tasks__typo-1", "model_patch": "x"}) + "\n")
    r, err = nexus("eval", "swebench", "grade", "--predictions", preds, "-o", tmp_path / "out")
    assert err and "not instances of" in err and "nexus-tasks__typo-1" in err
    assert not (tmp_path / "out").exists()


def test_an_eval_script_is_refused_not_ignored(nexus, tmp_path, shipped):
    row = dict(next(iter(shipped.values())).to_row(), eval_script="#!/bin/bash\nmake check\n")
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps(row) + "\n")
    r, err = nexus("eval", "swebench", "grade", "--instances", mine, "--predictions", "gold", "-o", tmp_path / "o")
    assert err and "No valid instances" in err
    assert "eval_script: is not supported" in r.stderr


def test_only_transient_errors_are_retried():
    from nexus.evals.swebench.grade import transient
    from nexus.sandbox.errors import SandboxError, SandboxUnavailable

    assert transient(SandboxUnavailable("engine gone")) and transient(RuntimeError("container did not start"))
    assert not transient(NexusError("no image")) and not transient(SandboxError("bad path"))


@pytest.mark.docker
def test_grade_prints_each_error_exits_non_zero_and_does_not_retry_a_configuration_error(nexus, tmp_path, shipped,
                                                                                       docker_engine):
    inst = next(iter(shipped.values()))
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps(dict(inst.to_row(), image="nexus-no-such-image:1")) + "\n")
    r, err = nexus("eval", "swebench", "grade", "--instances", mine, "--predictions", "gold", "-o", tmp_path / "o")
    assert r.exit_code == 1 and err is None
    assert f"error: {inst.instance_id}: Docker image nexus-no-such-image:1" in r.stderr
    log = (tmp_path / "o" / inst.instance_id / "error.txt").read_text()
    assert "attempt 1" in log and "attempt 2" not in log
