"""Issue 14 section 2: Ctrl-C at every REPL prompt behaves as at `nexus>` (the session goes on, nothing is lost),
and however the session ends, patch.diff and a final trajectory exit status are written."""

import json
import os
import signal
import sys

import pexpect
import pytest

from .conftest import ROOT
from tests.conftest import LOCAL

SCRIPT = [
    "```bash\necho one > one.txt\n```",  # confirmed: an edit that must survive
    "```bash\necho two > two.txt\n```",  # Ctrl-C at `run it?`
    "```bash\necho two > two.txt\n```",  # `n`, then Ctrl-C at `comment>`
    "```bash\nsubmit\n```",
]


def _spawn(tmp_path, repo, script, mode="confirm"):
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, NEXUS_HOME=str(tmp_path / "home"), PYTHONPATH=pythonpath, TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "nexus.cli", "repl", "--repo", str(repo), "--model",
                                           f"scripted:{script}", "--sandbox", LOCAL, "--mode", mode,
                                           "-o", str(tmp_path / "session")],
                          env=env, cwd=str(tmp_path), encoding="utf-8", timeout=120, dimensions=(50, 200))
    child.logfile_read = open(tmp_path / "terminal.log", "w")
    return child


def _saved(tmp_path):
    out = tmp_path / "session"
    return (out / "patch.diff").read_text(), json.loads((out / "trajectory.json").read_text())


def _paused(child):
    child.expect("the task is paused")
    child.expect("nexus> ")


def _run(tmp_path, drive):
    try:
        drive()
    except pexpect.ExceptionPexpect:
        print((tmp_path / "terminal.log").read_text()[-4000:])
        raise


def test_ctrl_c_at_every_prompt_keeps_the_session_and_exit_saves_everything(calc_repo, write_script, tmp_path):
    child = _spawn(tmp_path, calc_repo.path, write_script(SCRIPT))

    def drive():
        child.expect("nexus> ")
        child.sendintr()  # at nexus>
        child.expect(r"use /exit to quit")
        child.expect("nexus> ")
        child.sendline("make files")
        child.expect(r"run it\? ")
        child.sendline("")  # runs `echo one > one.txt`
        child.expect(r"run it\? ")
        child.sendintr()  # at the confirmation
        _paused(child)
        child.sendline("go on")
        child.expect(r"run it\? ")
        child.sendline("n")
        child.expect("comment> ")
        child.sendintr()  # at the comment
        _paused(child)
        child.sendline("/human")
        child.expect("mode: human")
        child.sendline("your turn")
        child.expect("command> ")
        child.sendintr()  # at the human-mode command prompt
        _paused(child)
        child.sendline("again")
        child.expect("command> ")
        child.sendline("sleep 30")
        child.expect(r"\$ .*sleep 30")
        child.sendintr()  # while the command runs ...
        child.expect("comment for the model")
        child.sendintr()  # ... and at the comment prompt that follows
        child.expect("task paused")
        child.expect("nexus> ")
        child.sendline("last one")
        child.expect("command> ")
        child.sendline("echo three > three.txt")
        child.expect("command> ")
        child.sendline("/exit")
        child.expect("session saved")
        child.expect(pexpect.EOF)

    _run(tmp_path, drive)
    child.close()
    assert child.exitstatus == 0
    patch, traj = _saved(tmp_path)
    assert "+one" in patch and "+three" in patch and "two.txt" not in patch
    assert traj["exit_status"] == "interrupted"  # the session ended with the task still open
    assert [s["action"] for s in traj["steps"] if not s.get("rejected")][-1] == "echo three > three.txt"


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_any_exit_at_the_command_prompt_writes_the_patch_and_a_final_status(calc_repo, write_script, tmp_path,
                                                                            how):
    child = _spawn(tmp_path, calc_repo.path, write_script(SCRIPT), mode="human")

    def drive():
        child.expect("nexus> ")
        child.sendline("edit it")
        child.expect("command> ")
        child.sendline("echo kept > kept.txt")
        child.expect("command> ")
        child.sendintr()
        _paused(child)
        child.sendline("more")
        child.expect("command> ")
        if how == "eof":  # Ctrl-D at a prompt leaves the task paused; at `nexus>` it ends the session
            child.sendeof()
            child.expect("nexus> ")
            child.sendeof()
        else:
            child.kill(signal.SIGTERM)
        child.expect("session saved")
        child.expect(pexpect.EOF)

    _run(tmp_path, drive)
    child.close()
    patch, traj = _saved(tmp_path)
    assert "+kept" in patch
    assert traj["exit_status"] == "interrupted"
