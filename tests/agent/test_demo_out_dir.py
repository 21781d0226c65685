"""`nexus demo -o DIR` on a directory that holds a task refuses before loading anything, and does not suggest the
`--resume` that only `solve` has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NEXUS = str(Path(sys.executable).parent / "nexus")


def test_demo_into_an_existing_task_dir_names_no_resume(tmp_path):
    (tmp_path / "task.json").write_text("{}")
    run = subprocess.run([NEXUS, "demo", "-o", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.endswith(f"error: {tmp_path} already holds a task; choose another -o DIR.")
