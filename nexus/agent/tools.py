"""Install the agent's tools (nexus-file) into a sandbox, outside the repository so the patch stays clean."""

from __future__ import annotations

import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from nexus.errors import NexusError

FILETOOL = Path(__file__).with_name("filetool.py")


def tool_dir(sandbox: Any, task_id: str) -> str:
    """A writable directory the sandbox's commands can see, outside the repository."""
    if getattr(sandbox, "kind", "") == "local":
        # The local sandbox confines file access to its own root (the repo's parent); /tmp is private there.
        return str(PurePosixPath(sandbox.workdir).parent / ".nexus-tools")
    # Docker: the root fs is read-only and /tmp is a writable tmpfs.
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in task_id)[:48]
    return f"/tmp/.nexus-tools-{safe}"


def install_tools(sandbox: Any, task_id: str) -> str:
    """Copy nexus-file in; return the shell prefix that puts it on PATH for every agent command."""
    d = tool_dir(sandbox, task_id)
    sandbox.copy_in(FILETOOL, f"{d}/bin/nexus-file")
    res = sandbox.execute(f"chmod +x {shlex.quote(d)}/bin/nexus-file && mkdir -p {shlex.quote(d)}/history", timeout=30)
    if res.returncode != 0:
        raise NexusError(f"could not install nexus-file in the sandbox ({res.output.strip()[:200]}); "
                         "check that the sandbox has a writable /tmp.")
    # No .pyc files: a repo without a .gitignore would otherwise get binary noise in its patch.
    return (f"export PATH={shlex.quote(d)}/bin:$PATH NEXUS_FILE_HISTORY={shlex.quote(d)}/history "
            "PYTHONDONTWRITEBYTECODE=1; ")


def restore_patch(sandbox: Any, patch: str, task_id: str) -> None:
    """Re-apply the work tree changes saved at the last step (resume into a fresh sandbox)."""
    if not patch.strip():
        return
    path = f"{tool_dir(sandbox, task_id)}/resume.patch"
    sandbox.write_file(path, patch)
    res = sandbox.execute(f"git apply --whitespace=nowarn {shlex.quote(path)} && rm -f {shlex.quote(path)}", timeout=120)
    if res.returncode != 0:
        raise NexusError(f"could not re-apply the saved patch.diff in the new sandbox ({res.output.strip()[:200]}); "
                         "start the task again without --resume.")
