"""Replies from a script: a list of strings, or the assistant turns of a recorded trajectory.

Without a stream it is a pure test double (token counts are whitespace words). With a stream (`replay`), each
scripted turn is appended to a real InferenceStream as the assistant's message, so a recorded trajectory can be
replayed under another eviction policy or budget and the cache numbers are real.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from nexus.agent.backends.base import Message, Reply, StreamFeeder, SyncInfo
from nexus.errors import NexusError


def load_script(path: str | Path) -> list[str]:
    """A JSON list of reply strings, a JSON object with "replies", or a trajectory (its assistant messages)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NexusError(f"script file {p} does not exist; pass a JSON list of replies or a trajectory.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NexusError(f"cannot read script file {p} ({e}); pass a JSON list of replies or a trajectory.") from None
    if isinstance(data, dict) and isinstance(data.get("replies"), list):
        data = data["replies"]
    elif isinstance(data, dict) and isinstance(data.get("messages"), list):
        data = [m["content"] for m in data["messages"] if m.get("role") == "assistant"]
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise NexusError(f"script file {p} is not a list of reply strings or a nexus trajectory.")
    if not data:
        raise NexusError(f"script file {p} has no replies.")
    return data


class ScriptedBackend:
    def __init__(self, replies: list[str], stream: Any | None = None, protocol: str = "stream",
                 name: str = "scripted") -> None:
        self.replies = list(replies)
        self.feeder = StreamFeeder(stream, protocol) if stream is not None else None
        self.name = name

    def reply(self, messages: list[Message], on_token: Callable[[str], None] | None = None) -> tuple[Reply, SyncInfo]:
        # Indexed by the transcript, not a counter: after a resume the script continues where the task stopped.
        turn = sum(1 for m in messages if m["role"] == "assistant")
        t0 = time.perf_counter()
        sync = self.feeder.sync(messages) if self.feeder else SyncInfo()
        if turn >= len(self.replies):
            text = "The script has no more replies.\n\n```bash\nsubmit\n```"
        else:
            text = self.replies[turn]
        if on_token:
            on_token(text)
        if self.feeder:
            before = self.feeder.stream.stats.tokens_seen
            self.feeder.stream.append_message("assistant", text)
            self.feeder.synced += 1
            n = self.feeder.stream.stats.tokens_seen - before
        else:
            n = len(text.split())
        return Reply(text=text, n_tokens=n, stop_reason="script", seconds=time.perf_counter() - t0 - sync.seconds), sync

    def stats(self) -> dict[str, Any] | None:
        return self.feeder.stats() if self.feeder else None

    def invalidate(self, reason: str) -> None:
        if self.feeder:
            self.feeder.invalidate(reason)

    def close(self) -> None:
        pass
