"""Replies decoded by the local InferenceStream: one bounded KV cache for the whole task."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from nexus.agent.backends.base import Message, Reply, StreamFeeder, SyncInfo
from nexus.agent.task_anchor import task_anchor_params


@dataclass
class StreamSpec:
    """How to build the stream; kept so the REPL can rebuild it with another policy or budget."""

    model: str = "embedded"
    policy: str = "nexus"
    budget: int | str = 1024  # tokens per layer or a byte size ("64MiB")
    chunk_size: int = 256
    seed: int = 0
    policy_params: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None


_MODELS: dict[tuple[str, str | None, str | None], tuple[Any, Any]] = {}
# `eval swebench run --workers K` runs K agents as threads of one process. transformers' from_pretrained is not
# thread-safe (concurrent loads left weights on the meta device), so one thread loads and the others wait and share
# the model: its weights are read-only in inference, and each stream keeps its own cache and query recorder.
_LOAD_LOCK = threading.Lock()


def load_cached(spec: StreamSpec) -> tuple[Any, Any]:
    """Load a model once per process (the REPL rebuilds streams, not models; parallel agents share it)."""
    from nexus.runtime import load_model

    key = (spec.model, spec.device, spec.dtype)
    with _LOAD_LOCK:
        if key not in _MODELS:
            _MODELS[key] = load_model(spec.model, device=spec.device, dtype=spec.dtype)
        return _MODELS[key]


def make_stream(spec: StreamSpec) -> Any:
    from nexus.runtime import InferenceStream, make_policy

    model, tokenizer = load_cached(spec)
    policy = make_policy(spec.policy, **spec.policy_params)
    return InferenceStream(model, tokenizer, policy, budget=spec.budget, chunk_size=spec.chunk_size, seed=spec.seed)


class LocalBackend:
    def __init__(self, spec: StreamSpec, protocol: str = "stream", max_new_tokens: int = 384,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 reply_prefix: str = "") -> None:
        # reply_prefix: text the reply is made to start with (e.g. "```bash\n"), fed into the stream after the
        # generation prompt. Tiny models then write a command instead of chatting; decoding stops at the fence.
        self.reply_prefix = reply_prefix
        self.spec = spec
        self.feeder = StreamFeeder(make_stream(spec), protocol)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.name = f"local:{spec.model}"

    def reply(self, messages: list[Message], on_token: Callable[[str], None] | None = None) -> tuple[Reply, SyncInfo]:
        if self.feeder.synced == 0:  # a fresh or rebuilt stream: it is about to take the task
            self._anchor_the_task(messages)
        sync = self.feeder.sync(messages)
        t0 = time.perf_counter()
        try:
            if self.reply_prefix:
                text, n, reason = self._prefixed(on_token)
            else:
                gen = self.feeder.stream.generate_reply(
                    max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                    seed=self.seed, on_token=on_token,
                )
                text, n, reason = gen.text, len(gen.token_ids), gen.stop_reason
        except BaseException:
            # A decode cut short (Ctrl-C) leaves a half turn in the cache: rebuild from the transcript next time.
            self.feeder.invalidate("interrupted")
            raise
        self.feeder.synced += 1  # the generated turn is in the cache and becomes the transcript's next message
        return Reply(text, n, reason, time.perf_counter() - t0), sync

    def _anchor_the_task(self, messages: list[Message]) -> None:
        """Give a nexus stream the task anchor (nexus/agent/task_anchor.py) before it takes the transcript: the
        stream is made again with the task message's span, unless it already has it."""
        _, tokenizer = load_cached(self.spec)
        anchor = task_anchor_params(self.spec.policy, self.spec.policy_params, tokenizer, messages)
        policy = self.feeder.stream.policy
        if anchor and (policy.anchor_start, policy.anchor) != (anchor["anchor_start"], anchor["anchor_tokens"]):
            spec = replace(self.spec, policy_params={**self.spec.policy_params, **anchor})
            self.feeder.stream = make_stream(spec)

    def _prefixed(self, on_token: Callable[[str], None] | None) -> tuple[str, int, str]:
        """generate_reply, with the reply's first characters given: prompt, prefix, decode, close the turn."""
        st = self.feeder.stream
        st.append(st.chat.generation_prompt())
        st.append(self.reply_prefix)
        if on_token:
            on_token(self.reply_prefix)
        stop = ["\n```"] if self.reply_prefix.lstrip().startswith("```") else []
        gen = st.generate(self.max_new_tokens, stop=stop, temperature=self.temperature, top_p=self.top_p,
                          seed=self.seed, on_token=on_token)
        text = self.reply_prefix + gen.text
        st.append(st.chat.close_assistant(text, ended_by_eos=gen.stop_reason == "eos"))
        return text, len(gen.token_ids), gen.stop_reason

    def reconfigure(self, *, policy: str | None = None, budget: int | str | None = None) -> None:
        """A new stream with another policy or budget; the next reply rebuilds it from the transcript."""
        spec = replace(self.spec, policy=policy or self.spec.policy,
                       budget=budget if budget is not None else self.spec.budget,
                       # -p parameters belong to the policy they were given for
                       policy_params={} if policy and policy != self.spec.policy else self.spec.policy_params)
        stream = make_stream(spec)  # raises (and changes nothing) when the combination is invalid
        self.spec = spec
        self.feeder.replace_stream(stream, "reconfigured")

    def stats(self) -> dict[str, Any] | None:
        return self.feeder.stats()

    def invalidate(self, reason: str) -> None:
        self.feeder.invalidate(reason)

    def close(self) -> None:
        pass
