"""Install the agent's tools (nexus-file) into a sandbox, where they stay out of the patch.

They go under the work tree's `.git/` directory: it is writable in every sandbox kind (docker cannot copy into
its tmpfs /tmp; the local sandbox confines files to its own root) and git never diffs its own directory.
"""

from __future__ import annotations

import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from nexus.errors import NexusError

FILETOOL = Path(__file__).with_name("filetool.py")
TOOL_DIR = ".git/nexus-tools"  # relative to the sandbox work dir


def tool_dir(sandbox: Any) -> str:
    return str(PurePosixPath(getattr(sandbox, "workdir", ".")) / TOOL_DIR)


def install_tools(sandbox: Any) -> str:
    """Copy nexus-file in; return the shell prefix that puts it on PATH for every agent command."""
    d = shlex.quote(tool_dir(sandbox))
    sandbox.copy_in(FILETOOL, f"{TOOL_DIR}/bin/nexus-file")
    res = sandbox.execute(f"chmod +x {d}/bin/nexus-file && mkdir -p {d}/history", timeout=30)
    if res.returncode != 0:
        raise NexusError(f"could not install nexus-file in the sandbox ({res.output.strip()[:200]}); "
                         "check that the work tree is writable.")
    # No .pyc files: a repo without a .gitignore would otherwise get binary noise in its patch.
    return f"export PATH={d}/bin:$PATH NEXUS_FILE_HISTORY={d}/history PYTHONDONTWRITEBYTECODE=1; "


def restore_patch(sandbox: Any, patch: str) -> None:
    """Re-apply the work tree changes saved at the last step (resume into a fresh sandbox)."""
    if not patch.strip():
        return
    sandbox.write_file(f"{TOOL_DIR}/resume.patch", patch)
    path = shlex.quote(f"{tool_dir(sandbox)}/resume.patch")
    res = sandbox.execute(f"git apply --whitespace=nowarn {path} && rm -f {path}", timeout=120)
    if res.returncode != 0:
        raise NexusError(f"could not re-apply the saved patch.diff in the new sandbox ({res.output.strip()[:200]}); "
                         "start the task again without --resume.")
