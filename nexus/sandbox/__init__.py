"""nexus.sandbox: where model-written commands run (Docker containers, or a weaker local fallback).

    from nexus.sandbox import create_sandbox, SandboxLimits
    with create_sandbox("auto", repo, base_commit=sha, task_id="django-1234") as sb:
        result = sb.execute("pytest -x", timeout=300)
        patch = sb.diff()
"""

from nexus.sandbox.base import Result, Sandbox, SandboxLimits
from nexus.sandbox.errors import SandboxError, SandboxFileNotFound
from nexus.sandbox.factory import create_sandbox

__all__ = ["Result", "Sandbox", "SandboxLimits", "SandboxError", "SandboxFileNotFound", "create_sandbox"]
