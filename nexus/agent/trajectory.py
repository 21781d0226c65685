"""The trajectory file: everything a task did, rewritten atomically after every step so a crash loses nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from nexus.errors import NexusError

FORMAT = "nexus-trajectory/1"


def build(task: dict[str, Any], config: dict[str, Any], state: dict[str, Any], *, exit_status: str | None,
          error: str | None = None, started: float, patch_lines: int | None = None) -> dict[str, Any]:
    steps = state.get("steps") or []
    last_stats = next((s["stats"] for s in reversed(steps) if s.get("stats")), None)
    peak = max((s["stats"].get("peak_cache_bytes", 0) for s in steps if s.get("stats")), default=None)
    return {
        "format": FORMAT,
        "task": task,
        "config": config,
        "exit_status": exit_status,
        "error": error,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "totals": {
            "steps": state.get("step", 0),
            "generated_tokens": state.get("generated_tokens", 0),
            "active_seconds": round(state.get("elapsed_s", 0.0), 3),
            "tokens_seen": (last_stats or {}).get("tokens_seen"),
            "tokens_stored": (last_stats or {}).get("tokens_stored"),
            "budget": (last_stats or {}).get("budget"),
            "peak_cache_bytes": peak,
            "stream_rebuilds": sum(1 for e in state.get("events") or [] if e.get("event") == "stream_rebuilt"),
            "patch_lines": patch_lines,
        },
        "events": state.get("events") or [],
        "steps": steps,
        "messages": state.get("messages") or [],
    }


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "trajectory.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NexusError(f"trajectory {p} does not exist; pass a trajectory.json or the output directory of a run.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NexusError(f"cannot read trajectory {p} ({e}); pass a trajectory.json written by nexus solve.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise NexusError(f"{p} is not a nexus trajectory (no format {FORMAT!r}); pass one written by nexus solve.")
    return data
