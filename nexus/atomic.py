"""Atomic file writes, used for every result, trajectory and report: a reader, or a crash at any moment, sees
the old file or the new one, never half of one (temp file in the same directory, fsync, os.replace)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results should read like any other file
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())  # the data is on disk before the rename makes it visible
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, obj: Any, *, indent: int = 1) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str) + "\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
