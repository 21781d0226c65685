"""Connecting to the docker engine with a clear sentence when none answers."""

from __future__ import annotations

import os

from nexus.sandbox.errors import SandboxUnavailable

_HOW_TO_START = "start one with scripts/docker-engine (as root) or use --sandbox local"


def engine_client(timeout: float = 120.0):  # -> docker.DockerClient
    """A docker client that has answered a ping; the API version is negotiated, never pinned."""
    import docker
    from docker.errors import DockerException

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as e:
        raise SandboxUnavailable(f"No docker engine answers at {where} ({_short(e)}); {_HOW_TO_START}.") from None
    except Exception as e:  # requests/urllib3 errors when the socket exists but the daemon is gone
        raise SandboxUnavailable(f"No docker engine answers at {where} ({_short(e)}); {_HOW_TO_START}.") from None
    return client


def engine_available() -> bool:
    try:
        engine_client(timeout=5.0).close()
        return True
    except SandboxUnavailable:
        return False


def image_exists(client, name: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(name)
        return True
    except ImageNotFound:
        return False


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:160]
