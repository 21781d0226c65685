"""Packages only the evaluation commands use, installed by `pip install 'nexus[eval]'` (`make` installs them).

The runtime, agent, sandbox and serve never import them, so `pip install nexus` stays small. An eval command run
without them ends with one sentence instead of a traceback: nexus/cli.py asks `missing_extra` about the error.
"""

from __future__ import annotations

EVAL_MODULES = ("swebench", "ray", "matplotlib")


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The sentence to show when `exc` is a missing eval-only package; None for any other missing module."""
    top = (exc.name or "").split(".")[0]
    if top not in EVAL_MODULES:
        return None
    return f"{top} is not installed; this command needs the eval extras: pip install 'nexus[eval]'."
