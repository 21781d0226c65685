"""Where the agent's replies come from: the local InferenceStream, or a script (tests, replays)."""

from nexus.agent.backends.base import Backend, Reply, SyncInfo

__all__ = ["Backend", "Reply", "SyncInfo"]
