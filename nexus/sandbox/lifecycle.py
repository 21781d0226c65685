"""Close every sandbox still open when the interpreter exits, and the labels that let `gc` find orphans."""

from __future__ import annotations

import atexit
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
