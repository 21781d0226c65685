"""Commands past their timeout die with their children; huge output comes back capped without bloating the client."""

from __future__ import annotations

import os
import time
import tracemalloc
import uuid

import pytest

from nexus.sandbox import SandboxLimits

from .conftest import KINDS


def _host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes containing `marker` (container processes are visible from the host)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            found.append(cmd)
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_sleep_past_timeout_is_killed_with_its_children(kind, repo, make_sandbox):
    secs = f"{900 + uuid.uuid4().int % 99}.{os.getpid() % 10}"  # a unique sleep length to find on the host
    with make_sandbox(kind, repo) as sb:
        t0 = time.monotonic()
        res = sb.execute(f"sleep {secs} & (sleep {secs}; echo child) & echo started; sleep {secs}", timeout=2)
        elapsed = time.monotonic() - t0
        assert res.timed_out
        assert res.returncode != 0
        assert "started" in res.output
        assert elapsed < 2 + 2, f"reported after {elapsed:.1f} s"
        deadline = time.monotonic() + 2
        while _host_processes_with(f"sleep {secs}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _host_processes_with(f"sleep {secs}") == []
        # The sandbox is still usable afterwards.
        again = sb.execute("echo alive", timeout=10)
        assert again.output.strip() == "alive" and not again.timed_out


@pytest.mark.parametrize("kind", KINDS)
def test_quick_command_is_not_reported_as_timed_out(kind, repo, make_sandbox):
    with make_sandbox(kind, repo) as sb:
        res = sb.execute("echo out; echo err >&2; exit 3", timeout=10)
    assert res.returncode == 3 and not res.timed_out and not res.truncated
    assert "out" in res.output and "err" in res.output


@pytest.mark.parametrize("kind", KINDS)
def test_50mb_of_output_is_capped_and_client_memory_stays_bounded(kind, repo, make_sandbox):
    limits = SandboxLimits(max_output_bytes=20_000)
    with make_sandbox(kind, repo, limits=limits) as sb:
        tracemalloc.start()
        try:
            res = sb.execute("head -c 50000000 /dev/zero | tr '\\0' 'x'; echo; echo THE-END", timeout=60)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert res.returncode == 0 and not res.timed_out
    assert res.truncated
    assert res.output.startswith("x" * 1000)
    assert res.output.rstrip().endswith("THE-END")
    assert "bytes of output elided" in res.output
    elided = int(res.output.split("[... ")[1].split(" bytes")[0])
    assert 50_000_000 - 20_000 < elided < 50_000_000
    assert len(res.output) < 20_000 + 200
    assert peak < 4_000_000, f"client allocated {peak} bytes at peak for 50 MB of output"


@pytest.mark.docker
def test_client_enforces_the_timeout_when_the_in_container_timeout_cannot(repo, make_sandbox):
    # Stopping `timeout` (the command's parent) keeps it from firing; the client's own deadline must end it.
    secs = f"{800 + uuid.uuid4().int % 99}.{os.getpid() % 10}"
    with make_sandbox("docker", repo) as sb:
        t0 = time.monotonic()
        res = sb.execute(f"kill -STOP $PPID; sleep {secs}", timeout=2)
        elapsed = time.monotonic() - t0
        assert res.timed_out
        assert elapsed < 2 + 2, f"reported after {elapsed:.1f} s"
        assert _host_processes_with(f"sleep {secs}") == []
        assert sb.execute("echo alive", timeout=10).output.strip() == "alive"


@pytest.mark.parametrize("kind", KINDS)
def test_stdin_is_closed(kind, repo, make_sandbox):
    with make_sandbox(kind, repo) as sb:
        res = sb.execute("cat; read -r line; echo stdin-closed rc=$?", timeout=5)
    assert not res.timed_out and res.output.strip() == "stdin-closed rc=1"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop we reproduce
@pytest.mark.parametrize("kind", KINDS)
def test_a_ctrl_c_that_cpython_dropped_still_stops_the_command(kind, repo, make_sandbox):
    """CPython drops a KeyboardInterrupt raised inside a garbage-collector callback ("Exception ignored"). That is
    reproduced here for real: the REPL's SIGINT handler runs inside a weakref callback, so its exception is dropped.
    The press it recorded must still end the running command, within the pump's one-second wake-up."""
    import signal
    import threading
    import weakref

    from nexus import interrupts

    class Garbage:
        pass

    def press_inside_a_gc_callback():
        obj = Garbage()
        ref = weakref.ref(obj, lambda _: interrupts._on_sigint(signal.SIGINT, None))
        del obj  # the callback runs now; its KeyboardInterrupt is printed and dropped
        assert ref() is None

    interrupts.clear()
    try:
        with make_sandbox(kind, repo) as sb:
            timer = threading.Timer(1.0, press_inside_a_gc_callback)
            t0 = time.monotonic()
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                sb.execute("sleep 20", timeout=60)
            elapsed = time.monotonic() - t0
            timer.join()
            interrupts.clear()
            after = sb.execute("echo alive", timeout=20)
    finally:
        interrupts.clear()
    assert elapsed < 4, f"the command ran {elapsed:.1f} s after a 1 s Ctrl-C"
    assert after.output.strip() == "alive"
