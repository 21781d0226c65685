"""Errors a user can cause. The CLI prints their message (one clear sentence) and exits non-zero."""


class NexusError(Exception):
    """A problem with the user's input or environment, worded as one sentence that says what to do."""


class UnsupportedModelError(NexusError):
    """The model's cache is not a plain full-attention KV cache (sliding-window, hybrid or recurrent)."""
