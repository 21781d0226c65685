"""What a running task needs that is not graph state: the backend (its KV stream), the sandbox, the config, and
UI hooks. Looked up by the langgraph thread id, because a KV cache cannot be checkpointed or serialised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from nexus.agent.backends.base import Backend
from nexus.agent.config import AgentConfig


def _quiet(kind: str, data: dict[str, Any]) -> None:
    pass


@dataclass
class Session:
    backend: Backend
    sandbox: Any  # nexus.sandbox.base.Sandbox
    config: AgentConfig
    command_prefix: str = ""  # puts nexus-file on PATH inside the sandbox
    on_event: Callable[[str, dict[str, Any]], None] = field(default=_quiet)  # "token", "action", "observation", ...
    track_patch: bool = False  # execute puts the work tree's diff into the graph state (solve; resume needs it)


_REGISTRY: dict[str, Session] = {}


def register(thread_id: str, session: Session) -> None:
    _REGISTRY[thread_id] = session


def unregister(thread_id: str) -> None:
    _REGISTRY.pop(thread_id, None)


def lookup(config: dict[str, Any]) -> Session:
    thread_id = config["configurable"]["thread_id"]
    try:
        return _REGISTRY[thread_id]
    except KeyError:
        raise RuntimeError(f"no agent session registered for thread {thread_id!r}") from None
