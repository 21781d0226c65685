"""Bad input gets one clear sentence; create_sandbox picks docker when it can and says so when it cannot."""

from __future__ import annotations

import pytest

from nexus.sandbox import Sandbox, SandboxError, create_sandbox
from nexus.sandbox.docker_sandbox import DockerSandbox
from nexus.sandbox.local_sandbox import LocalSandbox
from tests.conftest import LOCAL

from .conftest import git


def _one_sentence(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith("."), msg
    return msg


@pytest.mark.parametrize("kind", ["auto", "docker", "local"])
def test_missing_repo_path(kind, tmp_path):
    with pytest.raises(SandboxError) as e:
        create_sandbox(kind, tmp_path / "nope")
    assert "does not exist" in _one_sentence(e) and "nope" in str(e.value)


def test_not_a_git_repo_and_bad_commit(tmp_path, repo):
    with pytest.raises(SandboxError) as e:
        create_sandbox("local", tmp_path)
    assert "not a git repository" in _one_sentence(e)
    with pytest.raises(SandboxError) as e:
        create_sandbox("local", repo, base_commit="deadbeef")
    assert "no commit deadbeef" in _one_sentence(e)
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(SandboxError) as e:
        create_sandbox("local", empty)
    assert "no commit yet" in _one_sentence(e)


def test_unknown_kind(repo):
    with pytest.raises(SandboxError) as e:
        create_sandbox("podman", repo)
    assert "Unknown sandbox kind 'podman'" in _one_sentence(e)


def test_engine_down_is_one_sentence_and_auto_falls_back_with_a_warning(repo, monkeypatch, capfd):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxError) as e:
        DockerSandbox(repo).start()
    assert "No docker engine answers at unix:///nonexistent/docker.sock" in _one_sentence(e)
    sb = create_sandbox("auto", repo)
    assert isinstance(sb, LocalSandbox)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "no docker engine answers" in err and "weaker isolation" in err
    if LOCAL == "local-unsafe":  # no bubblewrap either: nothing can isolate, so it refuses (test_limits.py)
        with pytest.raises(SandboxError, match="local-unsafe"):
            sb.start()
        return
    with sb:
        assert sb.execute("echo ok", timeout=10).output.strip() == "ok"


@pytest.mark.docker
def test_missing_image(repo, docker_engine):
    with pytest.raises(SandboxError) as e:
        with create_sandbox("docker", repo, image="nexus-no-such-image:1"):
            pass
    msg = _one_sentence(e)
    assert "nexus-no-such-image:1 does not exist" in msg and "build-base" in msg


@pytest.mark.docker
def test_auto_is_docker_when_the_engine_answers(repo, base_image, capfd):
    sb = create_sandbox("auto", repo)
    assert isinstance(sb, DockerSandbox) and isinstance(sb, Sandbox)
    assert capfd.readouterr().err == ""
    with sb:
        assert sb.workdir == "/testbed"
        assert sb.execute("whoami", timeout=10).output.strip() == "nexus"


def test_local_is_a_sandbox_and_needs_starting(repo):
    sb = create_sandbox(LOCAL, repo)
    assert isinstance(sb, Sandbox)
    with pytest.raises(SandboxError) as e:
        sb.execute("true", timeout=5)
    assert "not started" in _one_sentence(e)
    with sb:
        root = sb.root
        assert root.exists()
    assert not root.exists()  # close() removes the copy
