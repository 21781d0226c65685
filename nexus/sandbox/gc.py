"""Find and remove sandbox containers left behind by processes that died without closing them."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from nexus.sandbox.engine import engine_client
from nexus.sandbox.lifecycle import BUILD_LABEL, SANDBOX_LABEL


@dataclass(frozen=True)
class SandboxInfo:
    name: str
    task: str
    status: str
    age_s: float
    orphan: bool  # the owner process is gone (or the container no longer runs)


def list_sandboxes(task: str | None = None) -> list[SandboxInfo]:
    client = engine_client()
    try:
        return [_info(c) for c in _labelled(client, task)]
    finally:
        client.close()


def gc(*, everything: bool = False, task: str | None = None, older_than_s: float | None = None) -> list[str]:
    """Remove orphaned nexus containers (all of them with `everything`); returns the names removed."""
    from docker.errors import NotFound

    client = engine_client()
    removed = []
    try:
        for c in _labelled(client, task):
            info = _info(c)
            old_enough = older_than_s is None or info.age_s >= older_than_s
            if (everything or info.orphan) and old_enough:
                try:
                    c.remove(force=True, v=True)
                    removed.append(info.name)
                except NotFound:
                    pass
    finally:
        client.close()
    return removed


def _labelled(client, task: str | None) -> list:
    out = {}
    for label in (SANDBOX_LABEL, BUILD_LABEL):
        filters = {"label": [label] + ([f"nexus.task={task}"] if task else [])}
        for c in client.containers.list(all=True, filters=filters):
            out[c.id] = c
    return list(out.values())


def _info(c) -> SandboxInfo:
    labels = c.labels or {}
    created = float(labels.get("nexus.created", "0") or 0)
    return SandboxInfo(
        name=c.name,
        task=labels.get("nexus.task", ""),
        status=c.status,
        age_s=time.time() - created if created else 0.0,
        orphan=c.status != "running" or _owner_gone(labels),
    )


def _owner_gone(labels: dict[str, str]) -> bool:
    # Only a process on this host can be checked; containers made elsewhere count as owned.
    if labels.get("nexus.host") != socket.gethostname():
        return False
    try:
        os.kill(int(labels.get("nexus.pid", "0")), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return False
