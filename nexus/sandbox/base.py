"""The Sandbox protocol: where model-written commands run. Docker and local implementations follow it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Result:
    """Outcome of one command. `output` is stdout and stderr interleaved, capped head+tail when `truncated`."""

    output: str
    returncode: int
    timed_out: bool = False
    truncated: bool = False


@runtime_checkable
class Sandbox(Protocol):
    """A work tree (a git repository checked out at a base commit) plus a place to run commands in it."""

    def start(self) -> None: ...

    def execute(
        self, command: str, timeout: float, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> Result: ...

    def write_file(self, path: str, content: str) -> None: ...

    def read_file(self, path: str) -> str: ...

    def copy_in(self, path: str | Path, dest: str | None = None) -> None: ...

    def diff(self) -> str:
        """`git diff` of the work tree against the base commit, new files included."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> "Sandbox": ...

    def __exit__(self, *exc: object) -> None: ...
