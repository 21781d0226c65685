"""Base and environment images: built locally, cached by content hash, network on only while building."""

from __future__ import annotations

import time

import pytest

from nexus.sandbox import SandboxError
from nexus.sandbox.docker_sandbox import DockerSandbox
from nexus.sandbox.images import BASE_IMAGE, build_env_image, ensure_base_image

pytestmark = pytest.mark.docker

NETS = "python3 -c 'import socket; print(*[n for _, n in socket.if_nameindex()])'"


@pytest.fixture
def cleanup_images():
    import docker

    tags: list[str] = []
    yield tags
    client = docker.from_env()
    for tag in tags:
        try:
            client.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
    client.close()


def test_base_image_is_cached_by_recipe(base_image):
    import docker

    t0 = time.monotonic()
    assert ensure_base_image() == BASE_IMAGE
    assert time.monotonic() - t0 < 5  # no rebuild: the label's recipe hash matches
    img = docker.from_env().images.get(BASE_IMAGE)
    assert len(img.labels["nexus.hash"]) == 64


def test_env_image_layers_the_repo_with_network_only_during_the_build(repo, base_image, cleanup_images):
    setup = [
        "python3 -m venv --without-pip /opt/venv && /opt/venv/bin/python -c 'print(1)'",
        f"{NETS} > /opt/build-nets",
        "mkdir -p demo.egg-info && echo built > demo.egg-info/PKG-INFO",  # an install's leftovers in /testbed
    ]
    tag = build_env_image(base_image, repo, setup)
    cleanup_images.append(tag)
    assert tag.startswith("nexus-env:")
    t0 = time.monotonic()
    assert build_env_image(base_image, repo, setup) == tag  # cached by content hash
    assert time.monotonic() - t0 < 5
    (repo / "README").write_text("dirty\n")  # different content -> different image
    other = build_env_image(base_image, repo, setup)
    cleanup_images.append(other)
    assert other != tag
    with DockerSandbox(repo, image=tag) as sb:
        build_nets = sb.read_file("/opt/build-nets").split()
        run_nets = sb.execute(NETS, timeout=10).output.split()
        venv = sb.execute("/opt/venv/bin/python -c 'print(2)'", timeout=20)
        head = sb.execute("cat README; git status --porcelain", timeout=10).output
        leftovers = sb.read_file("demo.egg-info/PKG-INFO")
        patch = sb.diff()
    assert "lo" in build_nets and len(build_nets) > 1  # the build had a real interface
    assert run_nets == ["lo"]
    assert venv.output.strip() == "2"
    assert head == "second\n"  # the sandbox's copy is the base commit, not the image's dirty tree
    assert leftovers == "built\n" and patch == ""  # the install stays, but is not reported as a change


def test_env_image_from_setup_script_and_failing_step(tmp_path, base_image, cleanup_images):
    script = tmp_path / "setup.sh"
    script.write_text("echo scripted > /opt/marker\n")
    tag = build_env_image(base_image, script, [])
    cleanup_images.append(tag)
    import docker

    out = docker.from_env().containers.run(tag, ["cat", "/opt/marker"], remove=True, network_mode="none")
    assert out.decode().strip() == "scripted"
    with pytest.raises(SandboxError) as e:
        build_env_image(base_image, script, ["echo about to fail; exit 7"])
    assert "exit code 7" in str(e.value) and "about to fail" in str(e.value)
    t0 = time.monotonic()
    with pytest.raises(SandboxError, match="killed after 1 s"):
        build_env_image(base_image, script, ["sleep 60"], step_timeout_s=1)
    assert time.monotonic() - t0 < 20
    with pytest.raises(SandboxError, match="does not exist"):
        build_env_image("nexus-no-such-base:1", script, [])
    with pytest.raises(SandboxError, match="does not exist"):
        build_env_image(base_image, tmp_path / "missing", [])


def test_base_from_existing_image(base_image, cleanup_images):
    # Stands in for a registry image (`--base-image python:3.11-slim`), which cannot be pulled here.
    name = "nexus-test-from:1"
    cleanup_images.append(name)
    assert ensure_base_image(name, from_image=base_image) == name
    import docker

    tags = docker.from_env().images.get(name).tags
    cleanup_images.extend(tags)
    assert any(t.startswith("nexus-test-from:") and len(t.split(":")[1]) == 12 for t in tags)  # the hash tag

    out = docker.from_env().containers.run(name, ["id", "-u", "nexus"], remove=True, network_mode="none")
    assert out.decode().strip() == "1000"
    with pytest.raises(SandboxError, match="could not be pulled"):
        ensure_base_image("nexus-test-from:2", from_image="localhost:1/nexus-nope:1")
