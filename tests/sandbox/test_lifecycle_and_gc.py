"""No container outlives its `with` block (exceptions, Ctrl-C); `gc` removes orphans of dead processes only."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from nexus.sandbox.gc import gc, list_sandboxes




def _containers(task: str) -> list:
    import docker

    client = docker.from_env()
    try:
        return client.containers.list(all=True, filters={"label": [f"nexus.task={task}"]})
    finally:
        client.close()


def _task() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.mark.docker
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_exception_inside_with_leaves_no_container(exc, repo, make_sandbox):
    task = _task()
    with pytest.raises(exc):
        with make_sandbox("docker", repo, task_id=task) as sb:
            assert sb.execute("true", timeout=10).returncode == 0
            assert len(_containers(task)) == 1
            raise exc()
    assert _containers(task) == []


def _spawn_owner(repo, task: str, body: str) -> subprocess.Popen:
    """A separate Python process that opens a sandbox, prints READY, then runs `body`."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from nexus.sandbox.docker_sandbox import DockerSandbox
        with DockerSandbox({str(repo)!r}, task_id={task!r}) as sb:
            print("READY", flush=True)
            {body}
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    return proc


@pytest.mark.docker
def test_ctrl_c_during_a_command_removes_the_container(repo, base_image):
    task = _task()
    proc = _spawn_owner(repo, task, "sb.execute('sleep 60', timeout=120)")
    time.sleep(1.0)  # let the command start
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert "KeyboardInterrupt" in proc.stderr.read()
    assert _containers(task) == []


@pytest.mark.docker
def test_gc_removes_orphans_of_killed_processes_but_not_live_sandboxes(repo, make_sandbox, base_image):
    task = _task()
    orphan_owner = _spawn_owner(repo, task, "time.sleep(600)")
    orphan_owner.kill()  # SIGKILL: no cleanup code runs, the container is left behind
    orphan_owner.wait()
    with make_sandbox("docker", repo, task_id=task) as live:
        infos = sorted(list_sandboxes(task), key=lambda i: i.orphan)
        assert [i.orphan for i in infos] == [False, True]
        removed = gc(task=task)
        assert len(removed) == 1 and removed[0] == infos[1].name
        assert [c.name for c in _containers(task)] == [live.container.name]
        assert live.execute("echo still-here", timeout=10).output.strip() == "still-here"
        # --all removes owned ones too (scoped to this test's task so parallel users are safe).
        assert gc(everything=True, task=task) == [live.container.name]
    assert _containers(task) == []


@pytest.mark.docker
def test_container_removed_behind_our_back_is_one_sentence(repo, make_sandbox):
    from nexus.sandbox import SandboxError

    task = _task()
    with make_sandbox("docker", repo, task_id=task) as sb:
        gc(everything=True, task=task)
        with pytest.raises(SandboxError, match="cannot run commands"):
            sb.execute("true", timeout=5)


@pytest.mark.parametrize("kind", [pytest.param("docker", marks=pytest.mark.docker), "local", "local-plain"])
def test_ctrl_c_in_the_client_kills_the_running_command(kind, repo, make_sandbox):
    import os
    import threading

    from .test_timeouts_and_output import _host_processes_with

    secs = f"{700 + uuid.uuid4().int % 99}.{os.getpid() % 10}"
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        with make_sandbox(kind, repo) as sb:
            timer.start()
            sb.execute(f"sleep {secs}", timeout=60)
    timer.join()
    deadline = time.monotonic() + 3
    while _host_processes_with(f"sleep {secs}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _host_processes_with(f"sleep {secs}") == []
