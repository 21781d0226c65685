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


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one sandbox. Docker enforces them with cgroups; the local fallback with rlimits."""

    memory_mb: int = 2048  # docker: memory cgroup (no swap); local: RLIMIT_AS = address_space_mb or 2x this
    cpus: float = 1.0  # docker: nano_cpus; local: not enforced (RLIMIT_CPU below bounds total CPU time)
    pids: int = 256  # docker: pids cgroup; local: RLIMIT_NPROC on top of the processes the user already has
    cpu_seconds: int = 3600  # local only: RLIMIT_CPU per command
    file_size_mb: int = 1024  # local: RLIMIT_FSIZE; docker: bounded by the disk
    disk_mb: int = 4096  # the sandbox's files (work tree, .git, local $HOME/$TMPDIR): a command past it is killed
    address_space_mb: int | None = None  # local only; None = 2 x memory_mb (interpreters reserve address space)
    tmp_mb: int = 512  # docker: size of the /tmp and $HOME tmpfs (counts against memory)
    max_output_bytes: int = 32_768  # per command, head and tail kept, the middle elided
    max_diff_mb: int = 16  # diff(): a larger patch is refused (PatchTooLarge), never truncated
    user: str = "nexus"  # docker: run as this user when the image has it, else root with capabilities dropped
    read_only_root: bool = True  # docker: root file system read-only; the work dir, /tmp and $HOME writable
    network: bool = False  # False = no network at all (docker network_mode=none; local: bwrap --unshare-net)
    extra_ro_binds: tuple[str, ...] = ()  # local + bwrap: extra host paths visible read-only (e.g. a venv)
