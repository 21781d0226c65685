"""One model, one worker thread: every request's appends and decode run here, in the order they arrived.

The KV caches are the model's state, so forwards are never concurrent; a FIFO queue serves requests for
different sessions in turn and requests for one session in order. The HTTP layer waits on a Future and, for
streaming, receives text through a callback; setting a job's `cancel` (its client went away) stops the decode
at the next token.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from nexus.errors import NexusError
from nexus.serve.protocol import ApiError, ChatRequest
from nexus.serve.sessions import SessionStore


class Cancelled(Exception):
    """The client disconnected; the decode stopped."""


@dataclass
class Job:
    request: ChatRequest
    on_text: Callable[[str], None] | None = None  # streamed text, stop sequences already held back
    cancel: threading.Event = field(default_factory=threading.Event)


@dataclass
class Completion:
    content: str
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    session_id: str
    rebuilt: str | None
    stats: dict


class StopHoldback:
    """Streams text while holding back any tail that could still become a stop sequence."""

    def __init__(self, stops: list[str], emit: Callable[[str], None] | None):
        self.stops, self.emit = stops, emit
        self.text, self.sent = "", 0
        self.hold = max((len(s) for s in stops), default=1) - 1

    def cut(self, text: str) -> str:
        """`text` up to the first stop sequence (the API never returns the stop string)."""
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        return text[: min(hits)] if hits else text

    def feed(self, delta: str) -> None:
        self.text += delta
        visible = self.cut(self.text)
        safe = len(visible) if len(visible) < len(self.text) else max(len(visible) - self.hold, 0)
        self.flush(visible[:safe])

    def flush(self, upto: str) -> None:
        if self.emit is not None and len(upto) > self.sent and upto.startswith(self.text[: self.sent]):
            self.emit(upto[self.sent:])
            self.sent = len(upto)


def stream_bound_bytes(stream) -> int | None:
    """K/V bytes one stream can ever allocate (its buffers are reserved at budget + one chunk), or None when
    some layer keeps every token (dense policy or dense layers) and memory grows with the conversation."""
    policy = stream.policy
    if not policy.evicts or policy.dense_layers > 0:
        return None
    from nexus.runtime.budget import kv_bytes_per_token

    per_layer_token = kv_bytes_per_token(stream.model.config, stream.dtype) // stream.num_layers
    extra = max(stream.chunk_size, policy.decode_period)
    return per_layer_token * sum(b + extra for b in stream.layer_budgets)


class Engine:
    def __init__(self, model, tokenizer, make_stream: Callable[[], Any], served_model: str,
                 max_sessions: int, session_ttl: float, default_max_tokens: int):
        self.model, self.tokenizer = model, tokenizer
        self.served_model = served_model
        self.default_max_tokens = default_max_tokens
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        probe = make_stream()  # a budget the policy cannot run at fails here, before the server listens
        self.stream_bytes = stream_bound_bytes(probe)
        self.policy = probe.policy.describe()
        self.budget = probe.budget
        del probe
        self.store = SessionStore(make_stream, max_sessions, session_ttl)
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="nexus-serve-worker", daemon=True)
        self._worker.start()

    # --- submitting work -------------------------------------------------------------------------------------
    def submit(self, job: Job) -> Future:
        return self.call(lambda: self._complete(job))

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run fn on the worker thread, after everything queued before it."""
        fut: Future = Future()
        self._queue.put((fn, fut))
        return fut

    def pending(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            fn, fut = self._queue.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the request that asked; the worker keeps serving
                fut.set_exception(exc)

    # --- one chat completion ---------------------------------------------------------------------------------
    def _complete(self, job: Job) -> Completion:
        req = job.request
        if job.cancel.is_set():
            raise Cancelled()
        self.store.expire()
        session = self.store.resolve(req.messages, req.session_key)
        try:
            rebuilt, cached = self.store.prepare(session, req.messages)
        except NexusError as exc:
            raise ApiError(400, str(exc), param="messages") from exc
        stream = session.stream
        if rebuilt is not None:
            cached = 0
        try:
            stream.append(stream.chat.generation_prompt())
            max_new = self._room(stream, req.max_tokens, session.id)
            holdback = StopHoldback(req.stop, job.on_text)

            def on_token(delta: str) -> None:
                if job.cancel.is_set():
                    raise Cancelled()
                holdback.feed(delta)

            prompt_tokens = stream.tokens_seen
            gen = stream.generate(max_new, stop=req.stop, temperature=req.temperature, top_p=req.top_p,
                                  seed=req.seed, on_token=on_token)
            content = holdback.cut(gen.text)
            holdback.flush(content)
            stream.append(stream.chat.close_assistant(gen.text, ended_by_eos=gen.stop_reason == "eos"))
        except BaseException:
            session.invalid = "the previous reply was cut short"  # the cache holds a turn the client never saw
            raise
        self.store.add_reply(session, content)
        return Completion(
            content=content, finish_reason="length" if gen.stop_reason == "length" else "stop",
            prompt_tokens=prompt_tokens, cached_tokens=cached, completion_tokens=len(gen.token_ids),
            session_id=session.id, rebuilt=rebuilt, stats=stream.stats.as_dict(),
        )

    def _room(self, stream, max_tokens: int, session_id: str) -> int:
        """Tokens this reply may decode: positions are never reused, so a stream ends at the model's limit."""
        if self.max_positions is None:
            return max_tokens
        left = self.max_positions - stream.tokens_seen - 2  # 2: the end-of-turn tokens that close the reply
        if left < 1:
            self.store.delete(session_id)
            raise ApiError(
                400, f"This conversation has reached {stream.tokens_seen} tokens, the model's "
                     f"{self.max_positions} positions, and a stream never re-reads its history; drop older turns "
                     "from the messages or start a new conversation.",
                param="messages", code="context_length_exceeded")
        return min(max_tokens, left)

    # --- reporting -------------------------------------------------------------------------------------------
    def health(self) -> dict:
        sessions = self.store.snapshot()
        return {
            "status": "ok", "model": self.served_model, "policy": self.policy, "budget_tokens": self.budget,
            "sessions": len(sessions), "live_sessions": sum(s["live"] for s in sessions),
            "max_sessions": self.store.max_sessions, "cache_bytes": self.store.cache_bytes(),
            "cache_bytes_bound": None if self.stream_bytes is None else self.stream_bytes * self.store.max_sessions,
            "queued": self.pending(),
        }
