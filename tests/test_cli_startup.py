"""`nexus --help`, `-h` and `--version` answer without importing torch or transformers (they take seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NEXUS = str(Path(sys.executable).parent / "nexus")  # the installed console script, as a user runs it


def test_the_command_tree_loads_without_torch():
    code = "import sys, nexus.cli; print(sorted(m for m in ('torch', 'transformers', 'fastapi') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_short_flag_and_version():
    run = lambda *a: subprocess.run([NEXUS, *a], capture_output=True, text=True)  # noqa: E731
    assert "Usage: nexus" in run("-h").stdout and "serve" in run("-h").stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("nexus 0.")
