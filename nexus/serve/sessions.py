"""Which stream a request continues, and keeping those streams within a memory bound.

A session is one conversation: its InferenceStream and the transcript that stream holds, as the client sees it
(assistant turns as they were returned). A request names its session (an explicit key) or is matched to the
live session whose transcript its messages extend. Only the new suffix is appended; a transcript the client
rewrote rebuilds the stream from the new one. At most `max_sessions` streams hold KV memory: making room drops
the least recently used stream but keeps its transcript, so the conversation is rebuilt if it comes back.
Everything here runs on the engine's one worker thread.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from nexus.serve.protocol import Message

TRANSCRIPTS_PER_STREAM = 16  # remembered conversations per live stream, beyond which the oldest are forgotten


@dataclass
class Session:
    id: str
    explicit: bool  # named by the client; never matched to another client's messages
    transcript: list[Message] = field(default_factory=list)  # what `stream` holds
    replies: list[int] = field(default_factory=list)  # transcript indices of the replies this server wrote
    stream: Any | None = None  # None once dropped to make room (the transcript is kept)
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    turns: int = 0
    rebuilds: int = 0
    last_rebuild: str | None = None
    invalid: str | None = None  # the stream holds a turn the transcript does not (a cut-short reply)

    def describe(self, now: float) -> dict:
        out = {"id": self.id, "explicit": self.explicit, "live": self.stream is not None, "turns": self.turns,
               "messages": len(self.transcript), "rebuilds": self.rebuilds, "last_rebuild": self.last_rebuild,
               "idle_seconds": round(now - self.last_used, 1)}
        if self.stream is not None:
            s = self.stream.stats
            out.update(tokens_seen=s.tokens_seen, tokens_stored=s.tokens_stored, eviction_events=s.eviction_events,
                       tokens_evicted=s.tokens_evicted, cache_bytes=s.cache_bytes, certificate=s.certificate)
        return out


def common_prefix(a: list[Message], b: list[Message]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SessionStore:
    def __init__(self, make_stream: Callable[[], Any], max_sessions: int, ttl_seconds: float,
                 clock: Callable[[], float] = time.monotonic):
        self.make_stream = make_stream
        self.max_sessions = max_sessions
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.sessions: dict[str, Session] = {}

    # --- which session ---------------------------------------------------------------------------------------
    def resolve(self, messages: list[Message], key: str | None) -> Session:
        """The session a request continues: by key, else the longest live transcript its messages extend."""
        if key is not None:
            if key not in self.sessions:
                self._forget_oldest_dropped()
                self.sessions[key] = Session(id=key, explicit=True, created=self.clock(), last_used=self.clock())
            return self.sessions[key]
        best, best_len = None, 0
        for s in self.sessions.values():
            if s.explicit or not s.transcript:
                continue
            n = common_prefix(s.transcript, messages)
            extends = n == len(s.transcript)
            # A partial match is the same conversation only if the shared part holds a reply this server wrote, or
            # the client went on past a reply of ours that it dropped (mini-swe-agent drops a reply that fails its
            # format check): two runs that merely share a system prompt are different conversations.
            ours = any(i < n for i in s.replies) or (n in s.replies and n < len(messages))
            if (extends or ours) and (n > best_len or (n == best_len and best and s.last_used > best.last_used)):
                best, best_len = s, n
        if best is None:
            self._forget_oldest_dropped()
            best = Session(id=f"sess-{uuid.uuid4().hex[:16]}", explicit=False, created=self.clock(),
                           last_used=self.clock())
            self.sessions[best.id] = best
        return best

    # --- bring its stream up to date -------------------------------------------------------------------------
    def prepare(self, session: Session, messages: list[Message]) -> tuple[str | None, int]:
        """Make the session's stream hold `messages`; returns (why it was rebuilt or None, tokens not fed again)."""
        reason, old = None, session.transcript
        if session.stream is None:
            self._make_room(keep=session)
            session.stream = self.make_stream()
            if session.transcript:
                reason = "dropped to bound memory"
            session.transcript = []
        elif session.invalid is not None:
            reason = session.invalid
        elif common_prefix(session.transcript, messages) < len(session.transcript):
            reason = "history rewritten"
        if reason is not None:
            if session.transcript or session.invalid:
                session.stream.reset()
            session.transcript, session.invalid = [], None
            session.replies = [i for i in session.replies if i < common_prefix(old, messages)]
            session.rebuilds += 1
        session.last_rebuild = reason
        session.last_used = self.clock()
        cached = session.stream.tokens_seen
        try:
            for role, content in messages[len(session.transcript):]:
                session.stream.append_message(role, content)
        except BaseException:
            session.invalid = "a message could not be appended"
            raise
        session.transcript = list(messages)
        return reason, cached

    def add_reply(self, session: Session, content: str) -> None:
        session.replies.append(len(session.transcript))
        session.transcript.append(("assistant", content))
        session.turns += 1

    # --- memory and lifetime ---------------------------------------------------------------------------------
    def _make_room(self, keep: Session) -> None:
        live = [s for s in self.sessions.values() if s.stream is not None and s is not keep]
        while len(live) >= self.max_sessions:
            oldest = min(live, key=lambda s: s.last_used)
            oldest.stream = None  # frees its KV buffers; the transcript stays for a rebuild
            live.remove(oldest)

    def _forget_oldest_dropped(self) -> None:
        """Transcripts are host memory too: keep at most TRANSCRIPTS_PER_STREAM x max_sessions conversations."""
        while len(self.sessions) >= TRANSCRIPTS_PER_STREAM * self.max_sessions:
            dropped = [s for s in self.sessions.values() if s.stream is None] or list(self.sessions.values())
            del self.sessions[min(dropped, key=lambda s: s.last_used).id]

    def expire(self) -> list[str]:
        """Forget sessions idle for longer than the TTL."""
        now = self.clock()
        gone = [sid for sid, s in self.sessions.items() if now - s.last_used > self.ttl_seconds]
        for sid in gone:
            del self.sessions[sid]
        return gone

    def delete(self, session_id: str) -> bool:
        return self.sessions.pop(session_id, None) is not None

    def snapshot(self) -> list[dict]:
        now = self.clock()
        return [s.describe(now) for s in list(self.sessions.values())]

    def cache_bytes(self) -> int:
        return sum(s.stream.stats.cache_bytes for s in list(self.sessions.values()) if s.stream is not None)
