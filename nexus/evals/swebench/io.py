"""Result files of the SWE-bench runner and grader, written atomically (nexus.atomic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus.atomic import write_json_atomic as _write_json_atomic
from nexus.atomic import write_text_atomic

__all__ = ["write_json_atomic", "write_jsonl_atomic", "write_text_atomic"]


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Reports keep the 2-space layout the swebench harness writes."""
    _write_json_atomic(path, obj, indent=2)


def write_jsonl_atomic(path: str | Path, rows: list[dict[str, Any]]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
