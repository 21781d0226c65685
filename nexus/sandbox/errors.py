"""Sandbox errors a user can cause (bad repo path, missing image, engine down)."""

from __future__ import annotations

from nexus.errors import NexusError


class SandboxError(NexusError):
    """A sandbox could not be created or used; the message says what to do."""


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """A path inside the sandbox work dir does not exist."""


class PatchTooLarge(SandboxError):
    """The work tree's diff is over `SandboxLimits.max_diff_mb`: refused whole, never cut into a corrupt patch."""


class SandboxUnavailable(SandboxError):
    """The engine or the container went away: transient, unlike a missing image or a bad path (worth a retry)."""
