"""Issue 13 §2: a solve killed with SIGKILL at any moment and then resumed ends with exactly the patch of a run
that was never killed. 20 runs of a 40-step scripted solve (edits, appends, a new file, a deletion across several
files), each killed once at a seeded random point: after a random number of recorded steps plus a random part of
a step, so the kill lands in a command, between a command and its checkpoint, between the checkpoint and the
patch write, in an atomic write, at start-up or while the task is finishing."""

import glob
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import pytest

from nexus.agent.trajectory import load
from tests.conftest import LOCAL

N_COMMANDS = 39  # + submit = 40 steps
N_KILLS = 20


def edit(i: int) -> str:
    """Step i's command: every one changes the work tree, so losing any of them changes the final patch."""
    kind = i % 5
    if kind == 0:
        return f"nexus-file create notes/n{i:02}.md <<'EOF'\n# note {i}\nwritten at step {i}\nEOF"
    if kind == 1:
        return f"mkdir -p logs && echo 'log line {i}' >> logs/log{i % 3}.txt"
    if kind == 2:
        return f"printf '\\n\\ndef f{i}():\\n    return {i}\\n' >> calculator/ops.py"
    if kind == 3:
        return f"sed -i 's/^# calculator.*/&, edited at step {i}/' README.md && echo {i} >> README.md"
    return f"echo {i} > counter.txt && mkdir -p data && seq {i} > data/seq{i % 4}.txt"


SCRIPT = [f"Step {i}.\n\n```bash\n{edit(i)}\n```" for i in range(1, N_COMMANDS + 1)]
SCRIPT[29] = "Step 30: drop the old test file.\n\n```bash\nrm tests/test_ops.py\n```"
SCRIPT.append("Done.\n\n```bash\nsubmit\n```")


def _fork_nexus(args: list[str], log: Path, home: Path, setup: Callable[[], None] | None = None) -> int:
    """The real `nexus` CLI in a child process (forked, so the seconds of torch import are paid once, not 41
    times); the child is a session leader, so one killpg(SIGKILL) ends it with no cleanup of any kind. `setup`
    runs in the child first (the exact-point tests plant a hard exit there)."""
    from nexus.cli import app

    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        sys.stdout = sys.stderr = open(log, "a", buffering=1)
        os.dup2(sys.stdout.fileno(), 1)
        os.dup2(sys.stdout.fileno(), 2)
        os.environ.update(NEXUS_HOME=str(home), NO_COLOR="1")
        if setup is not None:
            setup()
        try:
            app(args, prog_name="nexus")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _run_nexus(args: list[str], log: Path, home: Path, setup: Callable[[], None] | None = None) -> tuple[int, str]:
    rc = _wait(_fork_nexus(args, log, home, setup))
    return rc, log.read_text()


def _remove_leftover_sandboxes(out: Path) -> None:
    """A SIGKILL leaves the local sandbox's temp dir behind (`nexus sandbox gc` would find it); tidy up here."""
    thread = json.loads((out / "task.json").read_text())["thread_id"]
    for d in glob.glob(os.path.join(tempfile.gettempdir(), f"nexus-{thread}-*")):
        shutil.rmtree(d, ignore_errors=True)


def _steps_done(out: Path) -> int:
    try:
        return len(json.loads((out / "trajectory.json").read_text())["steps"])
    except (OSError, ValueError, KeyError):
        return 0


def _solve_argv(repo: Path, script: Path, out: Path) -> list[str]:
    return ["solve", "--repo", str(repo), "--issue", "edit many files",
            "--model", f"scripted:{script}", "--sandbox", LOCAL, "-o", str(out), "--max-steps", "60", "--quiet"]


def _check_finished(out: Path, n_steps: int = len(SCRIPT)) -> str:
    traj = load(out)
    assert traj["exit_status"] == "submitted", traj.get("error")
    assert [s["step"] for s in traj["steps"]] == list(range(1, n_steps + 1))  # none lost, none repeated
    assert all(s["returncode"] == 0 for s in traj["steps"][:-1]), [s["observation"] for s in traj["steps"]]
    patch = (out / "patch.diff").read_bytes().decode("utf-8")
    assert traj["patch"] == patch
    return patch


@pytest.mark.slow
def test_sigkill_at_20_random_points_then_resume_gives_the_uninterrupted_patch(calc_repo, write_script, tmp_path):
    script = write_script(SCRIPT)
    home = tmp_path / "home"
    ref_out = tmp_path / "reference"
    t0 = time.monotonic()
    rc, log = _run_nexus(_solve_argv(calc_repo.path, script, ref_out), tmp_path / "reference.log", home)
    assert rc == 0, log
    ref_wall = time.monotonic() - t0
    reference = _check_finished(ref_out)
    for part in ("notes/n05.md", "logs/log1.txt", "def f37", "data/seq3.txt", "edited at step 38",
                 "deleted file mode"):  # the script's work really is in it
        assert part in reference
    step_s = ref_wall / len(SCRIPT)  # wall time per step, start-up included: a delay may reach past the next step

    rng = random.Random(13_2)
    report = []
    for run in range(N_KILLS):
        out = tmp_path / f"run{run:02}"
        # Stratified over the run: run r waits for a step count in its own 1/20 of the task (0 = start-up).
        lo, hi = run * len(SCRIPT) // N_KILLS, (run + 1) * len(SCRIPT) // N_KILLS
        after_steps = rng.randrange(lo, hi)
        delay = rng.uniform(0, 1.5 * step_s)
        pid = _fork_nexus(_solve_argv(calc_repo.path, script, out), tmp_path / f"run{run:02}.log", home)
        deadline = time.monotonic() + 300
        while (not (out / "task.json").exists() if after_steps == 0 else _steps_done(out) < after_steps):
            assert os.waitpid(pid, os.WNOHANG) == (0, 0), f"run {run} ended before {after_steps} steps"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(delay)
        os.killpg(pid, signal.SIGKILL)  # the task's process and everything in its session
        finished_first = _wait(pid) != -signal.SIGKILL
        killed_at = _steps_done(out)
        _remove_leftover_sandboxes(out)

        rc, log = _run_nexus(["solve", "--resume", "-o", str(out), "--quiet"], tmp_path / f"run{run:02}-resume.log",
                             home)
        ended_before = finished_first or "already ended" in log
        if ended_before:  # the kill came after the task had written everything: nothing left to resume
            assert load(out)["exit_status"] == "submitted"
        else:
            assert rc == 0, f"run {run} (killed after {killed_at} steps): {log}"
        patch = _check_finished(out)
        report.append((run, after_steps, round(delay, 3), killed_at, ended_before))
        assert patch == reference, f"run {run} killed after {killed_at} recorded steps (+{delay:.3f} s): " \
                                   f"the resumed patch differs from the uninterrupted one"
        runs = load(out)["runs"]
        assert runs[0]["resumed"] is False and (ended_before or runs[-1]["resumed"] is True)
    print("kill points (run, waited for steps, delay s, steps recorded at kill, ended before kill):", report)


# -- the same, at exact points (fast): the process dies with os._exit, as abruptly as SIGKILL, at a chosen call ------

SHORT = SCRIPT[:5] + [SCRIPT[-1]]  # 5 edits (a log, ops.py, README, counter + data, a note), then submit


def _die_at(name: str, when: Callable[..., bool]) -> Callable[[], None]:
    """A setup for the child: the n-th matching call of nexus.agent.run.`name` ends the process on the spot."""

    def setup() -> None:
        import nexus.agent.run as run

        real = getattr(run, name)

        def dying(*args, **kwargs):
            if when(*args, **kwargs):
                os._exit(137)
            return real(*args, **kwargs)

        setattr(run, name, dying)

    return setup


def _reference_and_killed(calc_repo, write_script, tmp_path, setup) -> tuple[str, Path]:
    script, home = write_script(SHORT), tmp_path / "home"
    rc, log = _run_nexus(_solve_argv(calc_repo.path, script, tmp_path / "ref"), tmp_path / "ref.log", home)
    assert rc == 0, log
    out = tmp_path / "out"
    rc, log = _run_nexus(_solve_argv(calc_repo.path, script, out), tmp_path / "killed.log", home, setup)
    assert rc == 137, log
    _remove_leftover_sandboxes(out)
    return _check_finished(tmp_path / "ref", len(SHORT)), out


def _resume(tmp_path: Path, out: Path) -> str:
    rc, log = _run_nexus(["solve", "--resume", "-o", str(out), "--quiet"], tmp_path / "resume.log", tmp_path / "home")
    assert rc == 0, log
    return _check_finished(out, len(SHORT))


def test_killed_between_the_checkpoint_and_the_patch_write(calc_repo, write_script, tmp_path):
    # Step 2's checkpoint is saved; the process dies as it writes patch.diff for step 2 (the bug of issue 13).
    def patch_write_after_step_2(path, text):
        return Path(path).name == "patch.diff" and "def f2" in text

    reference, out = _reference_and_killed(calc_repo, write_script, tmp_path,
                                           _die_at("write_text_atomic", patch_write_after_step_2))
    assert len(load(out)["steps"]) == 1 and "def f2" not in (out / "patch.diff").read_text()  # one step behind
    assert _resume(tmp_path, out) == reference
    assert load(out)["runs"][1]["from_step"] == 2  # step 2 is not run again: its edit comes from the checkpoint


def _die_at_sqlite_connect() -> None:
    import nexus.agent.run as run

    class Dying:
        @staticmethod
        def connect(*args, **kwargs):
            os._exit(137)

    run.sqlite3 = Dying


def test_killed_before_the_first_checkpoint(calc_repo, write_script, tmp_path):
    # task.json is written, the checkpoint database never opened: resume starts the task from the beginning.
    reference, out = _reference_and_killed(calc_repo, write_script, tmp_path, _die_at_sqlite_connect)
    assert (out / "task.json").exists() and not (out / "checkpoints.sqlite").exists()
    assert _resume(tmp_path, out) == reference
    assert load(out)["runs"][0]["from_step"] == 0


def test_killed_while_the_finished_task_writes_its_trajectory(calc_repo, write_script, tmp_path):
    # The graph ended (submitted, in the checkpoint); the process dies writing the final trajectory.
    reference, out = _reference_and_killed(
        calc_repo, write_script, tmp_path,
        _die_at("write_json_atomic", lambda path, obj, **kw: Path(path).name == "trajectory.json"
                and obj.get("exit_status") is not None))
    assert load(out)["exit_status"] is None
    assert _resume(tmp_path, out) == reference
    assert "outputs" in load(out)["runs"][-1]["note"]
