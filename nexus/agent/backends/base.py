"""The backend protocol plus the part every stream-holding backend shares: keeping the stream in step with the
transcript under the `stream` or `reprefill` cache protocol."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

Message = dict[str, str]  # {"role": ..., "content": ...}; plain dicts so the checkpointer can store them


@dataclass(frozen=True)
class Reply:
    text: str
    n_tokens: int
    stop_reason: str  # "stop" | "eos" | "length" | "script"
    seconds: float


@dataclass(frozen=True)
class SyncInfo:
    """What bringing the stream up to date with the transcript cost."""

    appended: int = 0  # messages appended to the stream
    rebuilt: str | None = None  # why the cache was rebuilt from the transcript ("resume", "reprefill", ...)
    seconds: float = 0.0


class Backend(Protocol):
    name: str

    def reply(self, messages: list[Message], on_token: Callable[[str], None] | None = None) -> tuple[Reply, SyncInfo]:
        """The next assistant turn for a transcript (the last message is not the assistant's)."""
        ...

    def stats(self) -> dict[str, Any] | None: ...

    def invalidate(self, reason: str) -> None:
        """The stream no longer matches the transcript (interrupted decode, new policy): rebuild on next reply."""
        ...

    def close(self) -> None: ...


class StreamFeeder:
    """Feeds transcript messages to an InferenceStream, appending only what it has not seen.

    `stream` protocol: the cache is built once and only ever appended to (evictions are permanent).
    `reprefill`: before every reply the cache is reset and the whole transcript appended again (evicting again).
    A fresh feeder facing a transcript that already has assistant turns is a resume: it rebuilds, and says so.
    """

    def __init__(self, stream: Any, protocol: str = "stream") -> None:
        self.stream = stream
        self.protocol = protocol
        self.synced = 0  # transcript messages the stream holds
        self._invalid: str | None = None
        self.rebuilds = 0

    def invalidate(self, reason: str) -> None:
        self._invalid = reason

    def replace_stream(self, stream: Any, reason: str) -> None:
        self.stream = stream
        self.synced = 0
        self._invalid = reason

    def sync(self, messages: list[Message]) -> SyncInfo:
        t0 = time.perf_counter()
        reason = self._invalid
        if reason is None and self.protocol == "reprefill" and self.synced > 0:
            reason = "reprefill"
        if reason is None and self.synced == 0 and any(m["role"] == "assistant" for m in messages):
            reason = "resume"
        if reason is not None:
            if self.synced > 0 or self._invalid:
                self.stream.reset()
            self.synced = 0
            self.rebuilds += 1
        self._invalid = None
        if self.synced > len(messages):
            raise RuntimeError("the transcript is shorter than what the stream holds")
        new = messages[self.synced :]
        for m in new:
            self.stream.append_message(m["role"], m["content"])
        self.synced = len(messages)
        return SyncInfo(appended=len(new), rebuilt=reason, seconds=time.perf_counter() - t0)

    def stats(self) -> dict[str, Any]:
        return stream_stats(self.stream)


def stream_stats(stream: Any) -> dict[str, Any]:
    stats = stream.stats
    return stats.as_dict() if hasattr(stats, "as_dict") else dict(stats)
