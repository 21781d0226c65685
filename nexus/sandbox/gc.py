"""Find and remove sandbox containers left behind by processes that died without closing them."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nexus.sandbox.engine import engine_client
from nexus.sandbox.lifecycle import BUILD_LABEL, OWNER_FILE, SANDBOX_LABEL, owner_gone


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
        for c in client.containers.list(all=True, filters=filters, ignore_removed=True):  # others remove too
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
        orphan=c.status != "running" or owner_gone(labels),
    )




def gc_local(*, task: str | None = None, tmp_dir: str | None = None) -> list[str]:
    """Remove local sandbox dirs (nexus-*/ with an owner file) whose owner process is gone."""
    removed = []
    for owner in Path(tmp_dir or tempfile.gettempdir()).glob(f"nexus-*/{OWNER_FILE}"):
        try:
            labels = json.loads(owner.read_text())
        except (OSError, ValueError):
            continue
        if (task is None or labels.get("nexus.task") == task) and owner_gone(labels):
            shutil.rmtree(owner.parent, ignore_errors=True)
            removed.append(str(owner.parent))
    return removed
