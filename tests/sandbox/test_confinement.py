"""No network, no writes outside the work dir, no reads of host files, pids and memory limits hold."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from nexus.sandbox import SandboxLimits

# Local confinement needs bubblewrap; plain rlimits cannot hide the network or the host file system.
CONFINED = [pytest.param("docker", marks=pytest.mark.docker), "local-bwrap"]

PY_CONNECT = (
    "python3 -c 'import socket,sys; "
    "s=socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), timeout=3); print(\"CONNECTED\")' {port}"
)
PY_DNS = "python3 -c 'import socket; print(socket.getaddrinfo(\"deb.debian.org\", 80)); print(\"RESOLVED\")'"


@pytest.fixture
def loopback_server():
    """A TCP server on the host's loopback that answers; proves the port is reachable from outside a sandbox."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = srv.getsockname()[1]
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # reachable from the host itself
    yield port
    stop.set()
    t.join()
    srv.close()


@pytest.mark.parametrize("kind", CONFINED)
def test_network_is_unreachable(kind, repo, make_sandbox, loopback_server):
    with make_sandbox(kind, repo) as sb:
        conn = sb.execute(PY_CONNECT.format(port=loopback_server), timeout=20)
        dns = sb.execute(PY_DNS, timeout=20)
        nets = sb.execute("python3 -c 'import socket; print(*[n for _, n in socket.if_nameindex()])'", timeout=10)
    assert conn.returncode != 0 and "CONNECTED" not in conn.output, conn.output
    assert dns.returncode != 0 and "RESOLVED" not in dns.output, dns.output
    assert nets.output.split() == ["lo"]


@pytest.mark.parametrize("kind", CONFINED)
def test_writes_outside_the_work_dir_fail_and_host_files_are_unreadable(kind, repo, make_sandbox, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP-SECRET\n")
    with make_sandbox(kind, repo) as sb:
        inside = sb.execute("echo ok > inside.txt && cat inside.txt", timeout=10)
        outside = {p: sb.execute(f"echo x > {p}", timeout=10) for p in ("/etc/nexus-probe", "/usr/nexus-probe", "/nexus-probe")}
        read = sb.execute(f"cat {secret}", timeout=10)
        read_repo = sb.execute(f"cat {repo}/hello.py", timeout=10)  # the host's original checkout
    assert inside.returncode == 0 and inside.output.strip() == "ok"
    for path, res in outside.items():
        assert res.returncode != 0, f"write to {path} succeeded"
    assert not any(Path(p).exists() for p in outside)
    assert read.returncode != 0 and "TOP-SECRET" not in read.output
    assert read_repo.returncode != 0 and "print('hello')" not in read_repo.output


def _host_latency_during(fn) -> tuple[object, float]:
    """Run fn() while the host spawns `true` every 50 ms; return fn's result and the worst spawn time."""
    worst = 0.0
    done = threading.Event()

    def probe():
        nonlocal worst
        while not done.is_set():
            t0 = time.monotonic()
            subprocess.run(["true"])
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.05)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    try:
        result = fn()
    finally:
        done.set()
        t.join()
    return result, worst


@pytest.mark.parametrize("kind", CONFINED)
def test_fork_bomb_is_contained_and_host_stays_responsive(kind, repo, make_sandbox):
    limits = SandboxLimits(pids=64)
    with make_sandbox(kind, repo, limits=limits) as sb:
        bomb, worst = _host_latency_during(lambda: sb.execute("bomb() { bomb | bomb & }; bomb; sleep 5", timeout=6))
        after = sb.execute("echo alive", timeout=20)
    # The limit bit (bash reports failed forks) and nothing of the bomb survived the command.
    assert "fork" in bomb.output and ("retry" in bomb.output or "unavailable" in bomb.output), bomb.output[:300]
    assert worst < 2.0, f"host took {worst:.2f} s to spawn a process during the fork bomb"
    assert after.output.strip() == "alive"


@pytest.mark.docker
def test_fork_bomb_that_escapes_its_process_group_is_cleared(repo, make_sandbox):
    with make_sandbox("docker", repo, limits=SandboxLimits(pids=64)) as sb:
        sb.execute("setsid bash -c 'bomb() { bomb | bomb & }; bomb' & sleep 3", timeout=10)
        after = sb.execute("echo alive; ps -u $(id -u) -o pid= | wc -l", timeout=10)
    # Every process of the sandbox user is killed when a command ends: what runs now is this command's own.
    alive, count = after.output.split()
    assert alive == "alive" and after.returncode == 0
    assert int(count) < 10, after.output


@pytest.mark.docker
def test_memory_hog_is_oom_killed_in_docker(repo, make_sandbox):
    with make_sandbox("docker", repo, limits=SandboxLimits(memory_mb=256)) as sb:
        hog = sb.execute("python3 -c 'b = b\"x\" * (1 << 30); print(\"ALLOCATED\")'", timeout=60)
        after = sb.execute("echo alive", timeout=10)
    assert hog.returncode == 137 and not hog.timed_out, hog
    assert "ALLOCATED" not in hog.output
    assert after.output.strip() == "alive"


def test_memory_hog_fails_in_local_sandbox(repo, make_sandbox):
    with make_sandbox("local", repo, limits=SandboxLimits(memory_mb=256)) as sb:
        hog = sb.execute("python3 -c 'b = b\"x\" * (1 << 30); print(\"ALLOCATED\")'", timeout=60)
    assert hog.returncode != 0 and "ALLOCATED" not in hog.output
    assert "MemoryError" in hog.output


@pytest.mark.docker
def test_docker_cpu_quota_capabilities_and_user(repo, make_sandbox):
    """The container runs with the CPU quota it was given, no capabilities at all, and not as root."""
    spin = ("python3 -c 'import time; t = time.time()\n"
            "while time.time() - t < 2: pass\n"
            "print(round(time.process_time() / (time.time() - t), 2))'")
    with make_sandbox("docker", repo, limits=SandboxLimits(cpus=0.5)) as sb:
        # cgroup v2 writes "quota period" to cpu.max; v1 has the two numbers in separate files
        quota = sb.execute("cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)"
                           " $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)", timeout=10)
        caps = sb.execute("grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status", timeout=10)
        who = sb.execute("id -u", timeout=10)
        share = sb.execute(spin, timeout=20)
    assert quota.output.split() == ["50000", "100000"], quota.output  # 0.5 CPU: 50 ms in every 100 ms
    assert [line.split()[1] for line in caps.output.splitlines()] == ["0" * 16] * 3, caps.output
    assert who.output.strip() != "0"
    # a busy loop gets at most about half a CPU (the quota is enforced, not just written down)
    assert float(share.output.strip()) < 0.7, share.output
