"""What must be shown #5: the REPL driven through a real terminal (pexpect): confirm, reject with a comment,
switch to yolo, Ctrl-C with a comment, /stats, /diff, /exit; trajectory, patch and history are saved."""

import json
import os
import sys

import pexpect

from nexus.agent.examples import TEST_COMMAND

from .conftest import ROOT
from tests.conftest import LOCAL

FIX = ("```bash\nnexus-file str_replace calculator/ops.py --old '    return a - b\n\n\ndef subtract' "
       "--new '    return a + b\n\n\ndef subtract'\n```")
SCRIPT = [
    "Look first.\n```bash\ncat calculator/ops.py\n```",
    "```bash\nrm -rf tests\n```",
    "Fix it.\n" + FIX,
    "```bash\nsleep 8\n```",  # interrupted with Ctrl-C
    f"```bash\n{TEST_COMMAND}\n```",
    "```bash\nsubmit\n```",
]


def test_repl_in_a_real_terminal(calc_repo, write_script, tmp_path):
    home, out = tmp_path / "home", tmp_path / "session"
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, NEXUS_HOME=str(home), PYTHONPATH=pythonpath, TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "nexus.cli", "repl", "--repo", str(calc_repo.path), "--model",
                                           f"scripted:{write_script(SCRIPT)}", "--sandbox", LOCAL, "-o", str(out)],
                          env=env, cwd=str(tmp_path), encoding="utf-8", timeout=120, dimensions=(50, 200))
    transcript = open(tmp_path / "terminal.log", "w")
    child.logfile_read = transcript  # shown on failure: what the terminal displayed
    try:
        child.expect("/help lists commands")
        child.expect("nexus> ")
        child.sendline("make the tests pass")
        child.expect("cat calculator/ops.py")
        child.expect(r"run it\? \[Y/n/comment\] ")
        child.sendline("")  # confirm
        child.expect("return a - b")
        child.expect(r"\$ .*rm -rf tests")
        child.expect(r"run it\? ")
        child.sendline("n")
        child.expect("comment> ")
        child.sendline("keep the tests")
        child.expect("not run; your comment goes to the model")
        child.expect(r"run it\? ")  # the fix
        child.sendline("/yolo")
        child.expect("mode: yolo")
        child.expect("replaced 1 occurrence")
        child.expect(r"\$ .*sleep 8")
        child.sendintr()  # Ctrl-C while the command runs
        child.expect("step interrupted")
        child.expect("comment for the model")
        child.sendline("no sleeping please")
        child.expect(r"Ran 3 tests")  # yolo: runs without asking
        child.expect("task ended: submitted")
        child.expect("nexus> ")
        child.sendline("/stats")
        child.expect(r"steps\s+\d+")
        child.expect("nexus> ")
        child.sendline("/diff")
        child.expect(r"\+    return a \+ b")
        child.expect("nexus> ")
        child.sendline("/exit")
        child.expect("session saved")
        child.expect(pexpect.EOF)
    except pexpect.ExceptionPexpect:
        transcript.flush()
        print((tmp_path / "terminal.log").read_text()[-4000:])
        raise
    finally:
        child.close(force=True)
        transcript.close()

    traj = json.loads((out / "trajectory.json").read_text())
    rejected = [s for s in traj["steps"] if s.get("rejected")]
    assert len(rejected) == 1 and rejected[0]["action"] == "rm -rf tests" and rejected[0]["comment"] == "keep the tests"
    said = [m["content"] for m in traj["messages"] if m["role"] == "user"]
    assert any("keep the tests" in m for m in said) and any("no sleeping please" in m for m in said)
    assert [e["event"] for e in traj["events"]] == ["interrupted"]
    assert traj["exit_status"] == "submitted"
    assert "+    return a + b" in (out / "patch.diff").read_text()
    assert "make the tests pass" in (home / "repl_history").read_text()
