"""The local fallback: a clone in a temp dir and commands under rlimits, in bubblewrap when it works.

WEAKER ISOLATION THAN DOCKER. With bubblewrap: no network, a read-only view of the system directories, only the
sandbox's temp dir writable, host paths such as /home, /root or /work invisible, its own pid namespace (every
process of a command dies with it), a size-limited /tmp. Without it only rlimits, a scrubbed environment and (when
nexus runs as root) an unprivileged user stand between the command and the host: sandboxes can write into each
other's trees, `setsid` processes outlive the command, and the network is reachable. So a sandbox without
bubblewrap refuses to start unless asked for by name (`--sandbox local-unsafe`, `allow_unsafe=True` or
`use_bwrap=False`). Each command runs in a new session with stdin closed; on timeout the whole process group is
killed.
"""

from __future__ import annotations

import functools
import os
import pwd
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nexus import interrupts
from nexus.sandbox.base import Result, SandboxLimits
from nexus.sandbox.errors import SandboxError, SandboxFileNotFound
from nexus.sandbox.lifecycle import track, untrack, write_owner_file
from nexus.sandbox.output import OutputCap, disk_limit_notice
from nexus.sandbox.shell import with_env
from nexus.sandbox.workspace import clone_at, resolve_repo, work_tree_diff

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_DRAIN_S = 1.0
_UNPRIVILEGED = "nobody"  # who commands run as when nexus itself runs as root (root ignores RLIMIT_NPROC)
UNSAFE_REFUSAL = (
    "bubblewrap (bwrap) cannot run here, and without it the local sandbox does not isolate model-written commands "
    "(they can write into other sandboxes' trees, leave processes running on the host and reach the network); "
    "install bubblewrap (scripts/docker-engine does), use --sandbox docker, or pass --sandbox local-unsafe to run "
    "them unisolated anyway."
)
UNSAFE_WARNING = (
    "nexus: WARNING: local-unsafe sandbox without bubblewrap: commands run as {user} on this host with only rlimits; "
    "they can write into other sandboxes' trees and anything else {user} may write, leave processes running after "
    "close(), and reach the network."
)


class LocalSandbox:
    @property
    def kind(self) -> str:
        """What a trajectory records: "local-unsafe" once started without bubblewrap."""
        return "local-unsafe" if self.root is not None and not self.bwrap else "local"

    def __init__(
        self,
        repo: str | Path,
        *,
        base_commit: str | None = None,
        task_id: str = "nexus",
        limits: SandboxLimits | None = None,
        use_bwrap: bool | None = None,
        allow_unsafe: bool = False,
    ) -> None:
        self.repo_path, self.base_commit = resolve_repo(repo, base_commit)
        self.task_id = task_id
        self.limits = limits or SandboxLimits()
        self._want_bwrap = use_bwrap
        self._allow_unsafe = allow_unsafe or use_bwrap is False  # asking for no bwrap by name is asking for this
        self.root: Path | None = None
        self.workdir = ""
        self._uid: int | None = None  # switch to this user per command (only when we are root)
        self._gid: int | None = None
        self.bwrap = False

    @property
    def isolation(self) -> str:
        return "local+bubblewrap (weaker than docker)" if self.bwrap else "local rlimits only (much weaker than docker)"

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.root is not None:
            return
        self._uid, self._gid = command_user()
        track(self)
        safe_task = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.task_id)[:40]
        self.root = Path(tempfile.mkdtemp(prefix=f"nexus-{safe_task}-")).resolve()
        try:
            clone_at(self.repo_path, self.root / "repo", self.base_commit)
            (self.root / "home").mkdir()
            (self.root / "tmp").mkdir()
            if self._uid is not None:
                _chown_tree(self.root, self._uid, self._gid)
            # Lets `nexus sandbox gc` remove the dir if we are killed; written after the chown, so ours, not theirs.
            write_owner_file(self.root, self.task_id)
            self.workdir = str(self.root / "repo")
            if self._want_bwrap is None:
                self.bwrap = bwrap_works(self._uid, self._gid)
                if not self.bwrap and not self._allow_unsafe:
                    raise SandboxError(UNSAFE_REFUSAL)
            elif self._want_bwrap and not bwrap_works(self._uid, self._gid):
                raise SandboxError("bubblewrap (bwrap) is not installed or cannot create namespaces here; "
                                   "install it (scripts/docker-engine does) or pass use_bwrap=False.")
            else:
                self.bwrap = bool(self._want_bwrap)
        except BaseException:
            self.close()
            raise
        if not self.bwrap:
            _warn_unsafe_once(_UNPRIVILEGED if self._uid is not None else pwd.getpwuid(os.getuid()).pw_name)

    def close(self) -> None:
        untrack(self)
        root, self.root = self.root, None
        if root is not None:
            shutil.rmtree(root, onerror=_force_remove)

    def __enter__(self) -> "LocalSandbox":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands -------------------------------------------------------------------------------------------

    def execute(
        self, command: str, timeout: float, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> Result:
        return self._run(command, timeout, cwd=cwd, env=env, cap=self.limits.max_output_bytes)

    def _run(self, command: str, timeout: float, *, cwd: str | None, env: dict[str, str] | None, cap: int) -> Result:
        if timeout <= 0:
            raise SandboxError(f"Command timeout must be positive, got {timeout}.")
        workdir = self._inside(cwd) if cwd else Path(self.workdir)
        if not workdir.is_dir():
            raise SandboxError(f"Working directory {cwd} does not exist in the sandbox.")
        argv = (self._bwrap_argv(workdir) if self.bwrap else []) + ["bash", "-lc", with_env(command, env)]
        user_args = {} if self._uid is None else {"user": self._uid, "group": self._gid, "extra_groups": []}
        out = OutputCap(cap)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=self._env(),  # the caller's env is exported inside (with_env), after the login profile
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one killpg ends it and its children
            preexec_fn=functools.partial(_set_rlimits, _rlimits(self.limits, self._uid if self._uid is not None else os.getuid())),
            **user_args,
        )
        fd = proc.stdout.fileno()
        disk = DiskWatch(self._root, self.limits.disk_mb)
        try:
            stopped = _pump(fd, out, deadline=t0 + timeout, over_disk=disk.over)
        except BaseException:  # Ctrl-C in the client: the command (in its own session) would outlive us
            _killpg(proc.pid)
            proc.stdout.close()
            proc.wait()
            raise
        if stopped is None:
            # EOF can come before the exit: coreutils close stdout themselves, then exit; a SIGKILL in between
            # turned a clean exit into 137 (1 in 3 `mkdir`s without bubblewrap, whose leader holds the pipe).
            try:
                proc.wait(timeout=max(0.0, t0 + timeout - time.monotonic()))
            except subprocess.TimeoutExpired:
                stopped = "timeout"  # still running with its output closed, past the deadline
        # Whatever the command left running in its group ends with it (the zombie leader keeps the pgid ours).
        _killpg(proc.pid)
        killed = stopped == "timeout"
        if stopped:
            _pump(fd, out, deadline=time.monotonic() + _DRAIN_S)
        if stopped == "disk":
            out.feed(("\n" + disk_limit_notice(self.limits.disk_mb) + "\n").encode())
        proc.stdout.close()
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid)
            rc = proc.wait()
        rc = 128 - rc if rc < 0 else rc  # report signals like a shell does (SIGKILL -> 137)
        return Result(output=out.text(), returncode=rc, timed_out=killed, truncated=out.truncated)

    def _env(self) -> dict[str, str]:
        # Scrubbed: nothing of the host's environment (tokens, proxies, virtualenvs) leaks in.
        root = self._root
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(root / "home"),
            "TMPDIR": str(root / "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "USER": _UNPRIVILEGED if self._uid is not None else pwd.getpwuid(os.getuid()).pw_name,
        }
        return env

    def _bwrap_argv(self, cwd: Path) -> list[str]:
        argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
        if self.limits.network:
            argv.append("--share-net")
        # bwrap's tmpfs is otherwise unbounded (and counts against no limit): give it the docker sandbox's size.
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(self.limits.tmp_mb << 20), "--tmpfs", "/tmp"]
        for d in _SYSTEM_DIRS + tuple(self.limits.extra_ro_binds):
            p = Path(d)
            if p.is_symlink():
                argv += ["--symlink", os.readlink(p), d]
            elif p.exists():
                argv += ["--ro-bind", d, d]
        root = str(self._root)
        # The new root is bwrap's own tmpfs: make it read-only too, so only the sandbox dir and /tmp are writable.
        return argv + ["--bind", root, root, "--remount-ro", "/", "--chdir", str(cwd), "--"]

    # -- files ----------------------------------------------------------------------------------------------

    @property
    def _root(self) -> Path:
        if self.root is None:
            raise SandboxError("The sandbox is not started (or already closed); use it as `with create_sandbox(...)`.")
        return self.root

    def _inside(self, path: str) -> Path:
        """Resolve `path` (relative to the work dir) and refuse anything outside the sandbox, symlinks included."""
        p = (Path(self.workdir) / path).resolve()
        if p != self._root and self._root not in p.parents:
            raise SandboxError(f"Path {path} is outside the sandbox work dir {self.workdir}; use a path inside it.")
        return p

    def write_file(self, path: str, content: str) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        if self._uid is not None:
            _chown_tree_up_to(target, self._root, self._uid, self._gid)

    def read_file(self, path: str) -> str:
        target = self._inside(path)
        if not target.exists():
            raise SandboxFileNotFound(f"{target} does not exist in the sandbox.")
        if target.is_dir():
            raise SandboxError(f"{target} is a directory; read a file inside it.")
        return target.read_text(errors="replace")

    def copy_in(self, path: str | Path, dest: str | None = None) -> None:
        src = Path(path).expanduser()
        if not src.exists():
            raise SandboxError(f"{src} does not exist on the host; pass a file or directory to copy in.")
        target = self._inside(dest or src.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target)
        if self._uid is not None:
            _chown_tree(target, self._uid, self._gid)
            _chown_tree_up_to(target, self._root, self._uid, self._gid)

    def diff(self) -> str:
        return work_tree_diff(lambda script, timeout, cap: self._run(script, timeout, cwd=None, env=None, cap=cap),
                              self.base_commit, self.limits.max_diff_mb)


@functools.lru_cache(maxsize=None)
def _warn_unsafe_once(user: str) -> None:
    print(UNSAFE_WARNING.format(user=user), file=sys.stderr)


def command_user() -> tuple[int | None, int | None]:
    """(uid, gid) commands run as: `nobody` when nexus runs as root, else (None, None) for ourselves."""
    if os.geteuid() != 0:
        return None, None
    pw = pwd.getpwnam(_UNPRIVILEGED)
    return pw.pw_uid, pw.pw_gid


def bwrap_usable() -> bool:
    """Whether bubblewrap works here for the user commands run as (what `--sandbox local` needs)."""
    return bwrap_works(*command_user())


@functools.lru_cache(maxsize=4)
def bwrap_works(uid: int | None, gid: int | None) -> bool:
    """bwrap is installed and can create the namespaces we use (as the user commands will run as)."""
    if shutil.which("bwrap") is None:
        return False
    user_args = {} if uid is None else {"user": uid, "group": gid, "extra_groups": []}
    try:
        proc = subprocess.run(
            ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            **user_args,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _rlimits(limits: SandboxLimits, uid: int) -> list[tuple[int, int]]:
    """Computed in the parent: the child between fork and exec should do as little as possible."""
    mb = 1024 * 1024
    address_space = (limits.address_space_mb or 2 * limits.memory_mb) * mb
    # RLIMIT_NPROC counts every process of the user, so allow what it already runs plus the sandbox's share.
    nproc = _process_count(uid) + limits.pids
    return [
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_AS, address_space),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
    ]


def _set_rlimits(limits: list[tuple[int, int]]) -> None:
    for which, value in limits:
        resource.setrlimit(which, (value, value))


def _process_count(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _pump(fd: int, out: OutputCap, deadline: float, over_disk=lambda: False) -> str | None:
    """Read `fd` into `out` until EOF (None), the deadline ("timeout") or `over_disk()` ("disk")."""
    while True:
        interrupts.raise_if_pressed()  # a Ctrl-C that CPython dropped (see nexus.interrupts)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        if over_disk():
            return "disk"
        ready, _, _ = select.select([fd], [], [], min(remaining, DiskWatch.EVERY_S))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        out.feed(chunk)


class DiskWatch:
    """The sandbox dir's allocated bytes, measured at most every EVERY_S while a command runs. Polling lets a fast
    writer pass the limit by what it writes in that time; there is no per-directory quota without root and a
    dedicated file system, and RLIMIT_FSIZE bounds only single files."""

    EVERY_S = 0.5

    def __init__(self, root: Path, disk_mb: int) -> None:
        self.root, self.limit = root, disk_mb << 20
        self._next = time.monotonic() + self.EVERY_S  # a command that ends sooner costs no walk of the tree

    def over(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.EVERY_S
        return _allocated_bytes(self.root) > self.limit


def _allocated_bytes(root: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass  # deleted while we walked
    return total


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _chown_tree(path: Path, uid: int, gid: int | None) -> None:
    g = -1 if gid is None else gid
    os.lchown(path, uid, g)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), uid, g)


def _chown_tree_up_to(path: Path, root: Path, uid: int, gid: int | None) -> None:
    # Directories that write_file/copy_in created on the way must be writable by the sandbox user too.
    p = path
    while p != root and root in p.parents:
        os.lchown(p, uid, -1 if gid is None else gid)
        p = p.parent


def _force_remove(func, path, _exc) -> None:
    try:
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        func(path)
    except OSError:
        pass
