"""Close every sandbox still open when the interpreter exits, and the labels that let `gc` find orphans."""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
import weakref
from typing import Any

SANDBOX_LABEL = "nexus.sandbox"
BUILD_LABEL = "nexus.build"

_open: "weakref.WeakSet[Any]" = weakref.WeakSet()


def owner_labels(task_id: str) -> dict[str, str]:
    """Who made a container: `gc` treats one whose owner process is gone as an orphan."""
    return {
        "nexus.task": task_id,
        "nexus.pid": str(os.getpid()),
        "nexus.host": socket.gethostname(),
        "nexus.created": str(int(time.time())),
    }


OWNER_FILE = ".nexus-owner"  # in a local sandbox's temp dir: the same facts as the docker labels


def write_owner_file(root: str | os.PathLike[str], task_id: str) -> None:
    with open(os.path.join(root, OWNER_FILE), "w") as fh:
        json.dump(owner_labels(task_id), fh)


def owner_gone(labels: dict[str, str]) -> bool:
    """True when the owner process ran on this host and is no longer alive."""
    if labels.get("nexus.host") != socket.gethostname():
        return False  # only a process on this host can be checked; treat others as owned
    try:
        os.kill(int(labels.get("nexus.pid", "0")), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return False


def track(sandbox: Any) -> None:
    _open.add(sandbox)


def untrack(sandbox: Any) -> None:
    _open.discard(sandbox)


@atexit.register
def _close_all() -> None:
    # Ctrl-C and exceptions are handled by the context manager; this covers sandboxes never closed at all.
    for sb in list(_open):
        try:
            sb.close()
        except Exception:
            pass
