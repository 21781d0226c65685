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
