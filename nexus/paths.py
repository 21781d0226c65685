"""Output directories a command will create, checked before anything runs (not a traceback from deep inside)."""

from __future__ import annotations

import os
from pathlib import Path

from nexus.errors import NexusError


def check_out_dir(path: Path, flag: str = "-o") -> None:
    """`path` is a writable directory, or can be made one; else one sentence naming the part in the way."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise NexusError(f"{flag} {path} is a file, not a directory; choose another {flag} DIR.")
        if not os.access(path, os.W_OK | os.X_OK):
            raise NexusError(f"{flag} {path} is not writable; choose another {flag} DIR.")
        return
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise NexusError(f"{flag} {path} cannot be created: {parent} is a file, not a directory; choose another "
                         f"{flag} DIR.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise NexusError(f"{flag} {path} cannot be created: {parent} is not writable; choose another {flag} DIR.")
