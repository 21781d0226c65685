"""`nexus sandbox ls` as a table: a header row, then one aligned row per container (as `docker ps` prints)."""

from __future__ import annotations

from nexus.sandbox.gc import SandboxInfo

HEADER = ("NAME", "TASK", "STATUS", "AGE", "OWNER")


def table_lines(infos: list[SandboxInfo]) -> list[str]:
    """The header always comes first, so an empty listing still reads as "no containers", not as a hang."""
    rows = [HEADER] + [(s.name, s.task, s.status, f"{s.age_s:.0f}s", "orphan" if s.orphan else "owned")
                       for s in infos]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
