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


def require_extras(*modules: str) -> None:
    """Fail before a long command starts when a package it needs at the end (grading, plots) is missing."""
    from importlib.util import find_spec

    for module in modules:
        try:
            missing = find_spec(module) is None
        except (ImportError, ValueError):  # a broken or half-removed install counts as missing
            missing = True
        if missing:
            from nexus.errors import NexusError

            raise NexusError(missing_extra(ModuleNotFoundError(name=module)))
