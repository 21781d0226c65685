"""Limits that must hold against a command trying to get past them (issue 13, section 3): no unisolated local
sandbox unless asked for by name, a bounded /tmp, no process outliving its command, no patch cut to fit."""

from __future__ import annotations

import pytest

from nexus.sandbox import SandboxLimits, create_sandbox
from nexus.sandbox import local_sandbox
from nexus.sandbox.errors import PatchTooLarge, SandboxError, SandboxFileNotFound

CONFINED = [pytest.param("docker", marks=pytest.mark.docker), "local-bwrap"]
EVERY = [pytest.param("docker", marks=pytest.mark.docker), "local-bwrap", "local-plain"]


@pytest.fixture
def no_bwrap(monkeypatch):
    """This machine as one without bubblewrap."""
    monkeypatch.setattr(local_sandbox, "bwrap_works", lambda uid, gid: False)


def test_local_without_bubblewrap_refuses_to_start(repo, no_bwrap):
    sb = create_sandbox("local", repo)
    with pytest.raises(SandboxError, match="local-unsafe") as e:
        sb.start()
    assert "\n" not in str(e.value)
    assert sb.root is None  # nothing left behind


def test_local_unsafe_runs_without_bubblewrap_and_says_what_is_not_isolated(repo, no_bwrap, capfd):
    local_sandbox._warn_unsafe_once.cache_clear()
    with create_sandbox("local-unsafe", repo) as sb:
        assert not sb.bwrap
        assert sb.execute("cat README", timeout=10).output == "second\n"
    err = capfd.readouterr().err
    assert "WARNING" in err and "other sandboxes' trees" in err and "network" in err


def test_bwrap_tmp_is_bounded(repo, make_sandbox):
    with make_sandbox("local-bwrap", repo, SandboxLimits(tmp_mb=8)) as sb:
        res = sb.execute("dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1; stat -c %s /tmp/fill", timeout=30)
    assert "No space left" in res.output, res.output
    assert int(res.output.split()[-1]) <= 8 << 20


@pytest.mark.parametrize("kind", CONFINED)
def test_setsid_process_does_not_outlive_its_command(kind, repo, make_sandbox):
    with make_sandbox(kind, repo) as sb:
        # (the [0] keeps pgrep from matching the shell whose command line holds the pattern)
        started = sb.execute("setsid sleep 300 </dev/null >/dev/null 2>&1 & sleep 0.5; pgrep -f 'sleep 30[0]'",
                             timeout=20)
        assert started.returncode == 0, started.output  # it was running while the command ran
        after = sb.execute("pgrep -f 'sleep 30[0]' || echo none", timeout=20)
    assert after.output.strip() == "none", after.output


@pytest.mark.parametrize("kind", EVERY)
def test_a_patch_over_the_limit_is_refused_not_cut(kind, repo, make_sandbox):
    with make_sandbox(kind, repo, SandboxLimits(max_diff_mb=1)) as sb:
        sb.execute("head -c 900000 /dev/urandom | base64 > big.txt", timeout=30)  # ~1.2 MB of text
        with pytest.raises(PatchTooLarge, match="more than 1 MB") as e:
            sb.diff()
        assert "\n" not in str(e.value)
        sb.execute("rm big.txt && echo small > small.txt", timeout=10)
        assert "+small" in sb.diff()  # under the limit again: the whole patch


@pytest.mark.docker
def test_docker_read_file_follows_symlinks(repo, make_sandbox):
    with make_sandbox("docker", repo) as sb:
        sb.execute("ln -s hello.py link.py && ln -s nowhere broken.py", timeout=10)
        assert sb.read_file("link.py") == "print('hello')\n"
        with pytest.raises(SandboxFileNotFound):
            sb.read_file("broken.py")


@pytest.mark.parametrize("kind", EVERY)
def test_filling_the_disk_stops_the_command_with_a_notice(kind, repo, make_sandbox):
    # 64 MB files one after another, each under the per-file limit, until 512 MB: the 48 MB disk limit stops it.
    with make_sandbox(kind, repo, SandboxLimits(disk_mb=48)) as sb:
        res = sb.execute("for i in $(seq 8); do head -c 64000000 /dev/zero > f$i; sleep 0.3; done; echo finished",
                         timeout=120)
        assert "finished" not in res.output and res.returncode != 0, res.output
        assert "disk limit of 48 MB" in res.output
        left = sb.execute("du -sm . | cut -f1", timeout=30)
        assert int(left.output.split()[-1]) < 48 + 3 * 64, left.output  # stopped within a few files of the limit
        assert sb.execute("rm -f f*; echo ok", timeout=30).output.strip() == "ok"  # and the sandbox goes on
