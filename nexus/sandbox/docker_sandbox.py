"""A Docker container as a sandbox: no network, cgroup limits, no capabilities, read-only root, non-root user.

The repository copy lives in an anonymous volume at /testbed (SWE-bench convention), seeded from the image's own
/testbed (an environment image's install) and overlaid with a clone at the base commit. Commands run as
`timeout -s KILL N bash -lc CMD`; the client watches the same deadline and kills the process group itself when
the in-container timeout did not end the stream.
"""

from __future__ import annotations

import io
import posixpath
import select
import shlex
import shutil
import struct
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from nexus import interrupts
from nexus.sandbox.base import Result, SandboxLimits
from nexus.sandbox.engine import engine_client, image_exists
from nexus.sandbox.errors import SandboxError, SandboxFileNotFound, SandboxUnavailable
from nexus.sandbox.images import BASE_IMAGE
from nexus.sandbox.lifecycle import SANDBOX_LABEL, owner_labels, track, untrack
from nexus.sandbox.output import OutputCap, disk_limit_notice
from nexus.sandbox.shell import with_env
from nexus.sandbox.workspace import clone_at, resolve_repo, tar_directory, work_tree_diff

WORKDIR = "/testbed"
HOME = "/tmp/home"  # the root fs is read-only; $HOME lives on the /tmp tmpfs
_GRACE_S = 1.0  # the client kills this long after the in-container timeout should have fired
_DRAIN_S = 1.0  # after a client-side kill, read what is left for at most this long


class DockerSandbox:
    kind = "docker"

    def __init__(
        self,
        repo: str | Path,
        *,
        base_commit: str | None = None,
        image: str | None = None,
        task_id: str = "nexus",
        limits: SandboxLimits | None = None,
    ) -> None:
        self.repo_path, self.base_commit = resolve_repo(repo, base_commit)
        self.image = image or BASE_IMAGE
        self.task_id = task_id
        self.limits = limits or SandboxLimits()
        self.workdir = WORKDIR
        self.container = None
        self._client = None
        self._user = "0:0"
        self._uid = self._gid = 0

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.container is not None:
            return
        self._client = engine_client()
        if not image_exists(self._client, self.image):
            raise SandboxError(
                f"Docker image {self.image} does not exist here; build it with `nexus sandbox build-base` "
                "(or build_env_image) or pass an image that exists."
            )
        from docker.types import Mount

        lim = self.limits
        track(self)
        try:
            self.container = self._client.containers.create(
                self.image,
                command=["sleep", "infinity"],
                init=True,  # reaps orphaned children of killed commands
                user="0:0",
                working_dir=WORKDIR,
                network_mode="bridge" if lim.network else "none",
                mem_limit=f"{lim.memory_mb}m",
                memswap_limit=f"{lim.memory_mb}m",  # equal to mem_limit: no swap
                nano_cpus=int(lim.cpus * 1e9),
                pids_limit=lim.pids,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=lim.read_only_root,
                tmpfs={"/tmp": f"rw,exec,nosuid,size={lim.tmp_mb}m,mode=1777"},
                mounts=[Mount(target=WORKDIR, source=None, type="volume")],
                labels={SANDBOX_LABEL: "1", **owner_labels(self.task_id)},
                environment={"HOME": HOME, "LANG": "C.UTF-8"},
            )
            self.container.start()
            self._pick_user()
            self._root_exec(f"mkdir -p {HOME} && chown {self._uid}:{self._gid} {HOME} {WORKDIR} || true")
            self._upload_repo()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        untrack(self)
        container, self.container = self.container, None
        if container is not None:
            from docker.errors import NotFound

            try:
                container.remove(force=True, v=True)
            except NotFound:
                pass
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "DockerSandbox":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pick_user(self) -> None:
        rc, out = self._root_exec("command -v bash && command -v timeout && command -v git")
        if rc != 0:
            raise SandboxError(
                f"Image {self.image} lacks bash, timeout (coreutils) or git, which sandboxes need; "
                "build on nexus-base:bookworm or install them in the image."
            )
        # The named user when the image has one (ours do); otherwise root, which has no capabilities here.
        rc, out = self._root_exec(f"id -u {self.limits.user} && id -g {self.limits.user}")
        if rc == 0:
            uid, gid = out.split()[:2]
            self._uid, self._gid = int(uid), int(gid)
            self._user = f"{uid}:{gid}"

    def _root_exec(self, script: str, check: bool = True, user: str = "0:0") -> tuple[int, str]:
        from docker.errors import APIError

        try:
            rc, out = self._c.exec_run(["sh", "-c", script], user=user, workdir=WORKDIR)
        except APIError:
            if check:
                raise
            return -1, ""
        return rc, (out or b"").decode(errors="replace")

    def _kill_group(self, pidfile: str) -> None:
        """Client-side timeout: kill the command's group; if no process can start in the container (its pids are
        used up), restart the container, which kills everything in it (the /testbed volume survives)."""
        # As the command's user: root here has no CAP_KILL for other users' processes. (dash's kill takes no "--".)
        rc, out = self._root_exec(f"kill -KILL -$(cat {pidfile})", check=False, user=self._user)
        if rc == -1 or (rc != 0 and "exec failed" in out):
            self._restart()

    def _upload_repo(self) -> None:
        tmp = Path(tempfile.mkdtemp(prefix="nexus-docker-"))
        try:
            clone_at(self.repo_path, tmp / "repo", self.base_commit)
            with tempfile.TemporaryFile() as fh:
                tar_directory(tmp / "repo", fh, uid=self._uid, gid=self._gid)
                fh.seek(0)
                self._c.put_archive(WORKDIR, fh)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        # Untracked files an environment image left in /testbed (egg-info, build output) are not the agent's
        # changes: exclude them so diff() reports only what happens from now on.
        rc, out = self._root_exec(
            "git -c safe.directory='*' ls-files --others --exclude-standard --directory | sed 's|^|/|' "
            ">> .git/info/exclude",
            user=self._user,
        )
        if rc != 0:
            raise SandboxError(f"Could not prepare the work tree in {self.image}: {out.strip()[:200]}")

    @property
    def _c(self):
        if self.container is None:
            raise SandboxError("The sandbox is not started (or already closed); use it as `with create_sandbox(...)`.")
        return self.container

    # -- commands -------------------------------------------------------------------------------------------

    def execute(
        self, command: str, timeout: float, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> Result:
        return self._run(command, timeout, cwd=cwd, env=env, cap=self.limits.max_output_bytes)

    def _run(
        self, command: str, timeout: float, *, cwd: str | None, env: dict[str, str] | None, cap: int
    ) -> Result:
        if timeout <= 0:
            raise SandboxError(f"Command timeout must be positive, got {timeout}.")
        api = self._client.api
        pidfile = f"/tmp/.nexus-exec-{uuid.uuid4().hex[:12]}"
        # timeout leads its own process group. When it returns, the wrapper kills what is left of that group with
        # the `kill` builtin, which needs no fork (a fork bomb has used up the pids limit by then).
        # A watcher beside it measures /testbed every second and kills the group past the disk limit (docker has
        # no size limit for a volume on overlay2 without xfs project quotas).
        notice = shlex.quote(disk_limit_notice(self.limits.disk_mb))
        watcher = (f'( while sleep 1; do u=$(du -sxm {WORKDIR} 2>/dev/null | cut -f1); '
                   f'if [ "${{u:-0}}" -gt {self.limits.disk_mb} ]; then echo; echo {notice}; '
                   'kill -KILL -- -$t 2>/dev/null; break; fi; done ) & w=$!; disown $w; ')  # disowned: killed silently
        wrapper = (
            f'timeout -s KILL "$0" bash -lc "$1" </dev/null & t=$!; echo $t > {pidfile}; {watcher}'
            f'wait $t; rc=$?; kill -KILL $w 2>/dev/null; kill -KILL -- -$t 2>/dev/null; '
            f'{self._kill_leftovers}rm -f {pidfile} 2>/dev/null; exit $rc'
        )
        from docker.errors import APIError
        from requests.exceptions import RequestException

        try:
            exec_id = api.exec_create(
                self._c.id,
                ["bash", "-c", wrapper, f"{timeout:.3f}", with_env(command, env)],
                stdin=False,
                user=self._user,
                workdir=self._path(cwd) if cwd else WORKDIR,
                environment={"HOME": HOME},  # the caller's env is exported inside (with_env), after the profile
            )["Id"]
        except APIError as e:  # removed (gc --all) or stopped behind our back
            raise SandboxUnavailable(
                f"The sandbox container {self._c.name} cannot run commands ({e.explanation or e}); "
                "close it and create a new sandbox."
            ) from None
        except RequestException as e:  # the engine itself went away
            raise SandboxUnavailable(
                f"The docker engine stopped answering ({str(e)[:120]}); start it again (scripts/docker-engine)."
            ) from None
        out = OutputCap(cap)
        t0 = time.monotonic()
        sock = api.exec_start(exec_id, socket=True)
        killed = _pump_frames(sock, out, deadline=t0 + timeout + _GRACE_S)
        if killed:
            self._kill_group(pidfile)
            _pump_frames(sock, out, deadline=time.monotonic() + _DRAIN_S)
        _close(sock)
        elapsed = time.monotonic() - t0
        rc = _exit_code(api, exec_id)
        timed_out = killed or (rc in (124, 137) and elapsed >= timeout * 0.98)
        text = out.text()
        if self._saturated():
            self._restart()
            text += "\n[nexus: processes left running used up the sandbox's process limit; all were killed]\n"
        return Result(output=text, returncode=rc, timed_out=timed_out, truncated=out.truncated)

    @property
    def _kill_leftovers(self) -> str:
        """Shell that kills every other process of the sandbox user: what escaped the group with setsid (the local
        sandbox gets this from bwrap's pid namespace). kill(-1) spares the caller; only for a non-root user,
        as root it would take the container's own `sleep` with it."""
        return "kill -KILL -1 2>/dev/null; " if self._uid != 0 else ""

    def _saturated(self) -> bool:
        """Leftovers that escaped the process group (setsid) hold nearly all pids: no command could start.
        `top` runs ps on the engine's side, so it works even when nothing can fork inside."""
        try:
            procs = self._c.top().get("Processes") or []
        except Exception:
            return False
        return len(procs) >= self.limits.pids - 4

    def _restart(self) -> None:
        # Kills every process in the container; the /testbed volume survives, /tmp (and $HOME) start empty.
        self._c.restart(timeout=0)
        self._root_exec(f"mkdir -p {HOME} && chown {self._uid}:{self._gid} {HOME}", check=False)

    # -- files ----------------------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(WORKDIR, path))

    def write_file(self, path: str, content: str) -> None:
        target = self._path(path)
        parent, name = posixpath.split(target)
        self._run(f"mkdir -p '{parent}'", 30, cwd=None, env=None, cap=4096)
        data = content.encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid, info.mtime = len(data), 0o644, self._uid, self._gid, time.time()
            tar.addfile(info, io.BytesIO(data))
        self._put(parent, buf.getvalue(), target)

    def read_file(self, path: str, _follow: bool = True) -> str:
        from docker.errors import NotFound

        target = self._path(path)
        try:
            stream, stat = self._c.get_archive(target)
        except NotFound:
            raise SandboxFileNotFound(f"{target} does not exist in the sandbox.") from None
        if stat.get("mode", 0) & (1 << 31):  # os.ModeDir in Go's FileMode
            raise SandboxError(f"{target} is a directory; read a file inside it.")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.getmembers()[0]
            if member.issym() or member.islnk():  # the archive holds the link, not what it points to
                if _follow:
                    return self.read_file(self._resolve_link(target), _follow=False)
                raise SandboxError(f"{target} is a link that does not end at a regular file.")
            fh = tar.extractfile(member)
            if fh is None:
                raise SandboxError(f"{target} is not a regular file.")
            return fh.read().decode("utf-8", errors="replace")

    def _resolve_link(self, target: str) -> str:
        res = self._run(f"readlink -f -- {shlex.quote(target)}", 30, cwd=None, env=None, cap=4096)
        if res.returncode != 0 or not res.output.strip():
            raise SandboxFileNotFound(f"{target} is a link to nothing in the sandbox.")
        return res.output.strip()

    def copy_in(self, path: str | Path, dest: str | None = None) -> None:
        src = Path(path).expanduser()
        if not src.exists():
            raise SandboxError(f"{src} does not exist on the host; pass a file or directory to copy in.")
        target = self._path(dest or src.name)
        parent, name = posixpath.split(target)
        self._run(f"mkdir -p '{parent}'", 30, cwd=None, env=None, cap=4096)
        with tempfile.TemporaryFile() as fh:
            tar_directory(src, fh, uid=self._uid, gid=self._gid, arcname=name)
            fh.seek(0)
            self._put(parent, fh, target)

    def _put(self, parent: str, data, target: str) -> None:
        from docker.errors import APIError

        try:
            self._c.put_archive(parent, data)
        except APIError as e:
            raise SandboxError(f"Could not write {target} in the sandbox: {e.explanation or e}.") from None

    def diff(self) -> str:
        return work_tree_diff(lambda script, timeout, cap: self._run(script, timeout, cwd=None, env=None, cap=cap),
                              self.base_commit, self.limits.max_diff_mb)


def _pump_frames(sock, out: OutputCap, deadline: float) -> bool:
    """Read docker's multiplexed frames into `out` until EOF (False) or `deadline` (True). Stdout and stderr are
    merged in arrival order."""
    raw = getattr(sock, "_sock", sock)
    buf = bytearray()
    while True:
        interrupts.raise_if_pressed()  # a Ctrl-C that CPython dropped (see nexus.interrupts)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        ready, _, _ = select.select([raw], [], [], min(remaining, 1.0))
        if not ready:
            continue
        chunk = raw.recv(1 << 16)
        if not chunk:
            return False
        buf += chunk
        # Frame: 1 byte stream id, 3 zero bytes, 4 bytes big-endian length, then the payload.
        while len(buf) >= 8:
            (size,) = struct.unpack(">I", buf[4:8])
            if len(buf) < 8 + size:
                break
            out.feed(bytes(buf[8 : 8 + size]))
            del buf[: 8 + size]


def _exit_code(api, exec_id: str) -> int:
    for _ in range(50):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(0.05)
    return -1


def _close(sock) -> None:
    try:
        sock.close()
    except Exception:
        pass
    raw = getattr(sock, "_sock", None)
    if raw is not None:
        try:
            raw.close()
        except Exception:
            pass

