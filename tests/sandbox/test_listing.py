"""`nexus sandbox ls` prints column headers, then aligned rows (engine-free: the listing is stubbed)."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from nexus.sandbox import gc
from nexus.sandbox.cli import register
from nexus.sandbox.gc import SandboxInfo
from nexus.sandbox.listing import table_lines


def test_header_then_one_aligned_row_per_container():
    lines = table_lines([SandboxInfo("nexus-sbx-abc", "task-1", "running", 12.4, False),
                         SandboxInfo("nexus-build-x", "t2", "exited", 3600.0, True)])
    assert lines[0].split() == ["NAME", "TASK", "STATUS", "AGE", "OWNER"]
    assert lines[1].split() == ["nexus-sbx-abc", "task-1", "running", "12s", "owned"]
    assert lines[2].split() == ["nexus-build-x", "t2", "exited", "3600s", "orphan"]
    assert {line.index(word) for line, word in zip(lines, ("TASK", "task-1", "t2"))} == {len("nexus-sbx-abc  ")}


def test_an_empty_listing_still_has_its_header():
    assert table_lines([]) == ["NAME  TASK  STATUS  AGE  OWNER"]


def test_ls_command_prints_the_table(monkeypatch):
    monkeypatch.setattr(gc, "list_sandboxes", lambda task=None: [SandboxInfo("nexus-sbx-abc", "t", "running", 1, False)])
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["sandbox", "ls"])
    assert res.exit_code == 0
    assert res.output.splitlines()[0].split() == ["NAME", "TASK", "STATUS", "AGE", "OWNER"]
    assert "nexus-sbx-abc" in res.output.splitlines()[1]
