"""Shell helpers shared by the sandboxes."""

from __future__ import annotations

import re
import shlex

from nexus.sandbox.errors import SandboxError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def with_env(command: str, env: dict[str, str] | None) -> str:
    """Prefix `command` with exports of `env`. `bash -lc` reads /etc/profile, which resets PATH on Debian; the
    caller's explicit variables must win over the login profile, so they are set again after it."""
    if not env:
        return command
    for key in env:
        if not _NAME.match(key):
            raise SandboxError(f"Environment variable name {key!r} is not valid; use letters, digits and _.")
    return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items()) + command
