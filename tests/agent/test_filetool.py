"""nexus-file, run as the agent runs it: a script with text on stdin."""

import subprocess
import sys
from pathlib import Path

from nexus.agent.tools import FILETOOL


def tool(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FILETOOL), *args], cwd=tmp_path, input=stdin, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={"NEXUS_FILE_HISTORY": str(tmp_path / ".hist"), "PATH": "/usr/bin:/bin"})


def test_view_with_line_range(tmp_path):
    (tmp_path / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = tool(tmp_path, "view", "f.txt", "3", "5").stdout.splitlines()
    assert [l.split("\t")[1] for l in out] == ["line 3", "line 4", "line 5"]
    assert out[0].strip().startswith("3")
    bad = tool(tmp_path, "view", "f.txt", "5", "3")
    assert bad.returncode == 1 and "START <= END" in bad.stderr


def test_str_replace_exactly_once_else_loud_failure(tmp_path):
    f = tmp_path / "f.py"
    f.write_text("x = 1\ny = 1\nx = 1\n")
    none = tool(tmp_path, "str_replace", "f.py", stdin="z = 1\n=======\nz = 2\n")
    assert none.returncode == 1 and "not found" in none.stderr
    many = tool(tmp_path, "str_replace", "f.py", stdin="x = 1\n=======\nx = 2\n")
    assert many.returncode == 1 and "occurs 2 times" in many.stderr and "lines 1, 3" in many.stderr
    assert f.read_text() == "x = 1\ny = 1\nx = 1\n"  # failures change nothing
    ok = tool(tmp_path, "str_replace", "f.py", stdin="y = 1\n=======\ny = 2\n")
    assert ok.returncode == 0, ok.stderr
    assert f.read_text() == "x = 1\ny = 2\nx = 1\n"
    ok2 = tool(tmp_path, "str_replace", "f.py", "--old", "x = 1\ny", "--new", "x = 0\ny")
    assert ok2.returncode == 0 and f.read_text() == "x = 0\ny = 2\nx = 1\n"


def test_create_insert_and_undo_in_order(tmp_path):
    assert tool(tmp_path, "create", "pkg/new.py", stdin="a\nc\n").returncode == 0
    assert tool(tmp_path, "insert", "pkg/new.py", "1", stdin="b\n").returncode == 0
    new = tmp_path / "pkg" / "new.py"
    assert new.read_text() == "a\nb\nc\n"
    assert tool(tmp_path, "insert", "pkg/new.py", "9", stdin="x\n").returncode == 1
    assert tool(tmp_path, "undo", "pkg/new.py").returncode == 0
    assert new.read_text() == "a\nc\n"
    assert tool(tmp_path, "undo", "pkg/new.py").returncode == 0
    assert not new.exists()  # created by nexus-file: undo removes it
    nothing = tool(tmp_path, "undo", "pkg/new.py")
    assert nothing.returncode == 1 and "no nexus-file edit" in nothing.stderr


def test_unknown_command_prints_usage(tmp_path):
    r = tool(tmp_path, "frobnicate")
    assert r.returncode == 1 and "str_replace PATH" in r.stderr
