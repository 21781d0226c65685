"""InferenceStream: one KV cache that lives for a whole task, held to a fixed budget by an eviction policy.

Appends are prefilled in chunks with eviction between chunks, so the cache never holds more than
budget + one chunk however long the appended text is. Generation decodes into the same cache and evicts every
tau steps. Chat messages are rendered with the model's chat template and only the new suffix is fed: nothing that
is already in the stream is ever prefilled again.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from nexus.errors import NexusError
from nexus.runtime.attention import ATTENTION_NAME, RECORDER_KWARG, register_attention
from nexus.runtime.bounded import EvictingCache, plan_layer_budgets
from nexus.runtime.budget import resolve_budget
from nexus.runtime.chat import ChatRenderer
from nexus.runtime.lines import LineCounter, line_break_table
from nexus.runtime.model_loading import check_supported
from nexus.runtime.policies import EvictionPolicy
from nexus.runtime.rope import anchor_rope
from nexus.runtime.sampling import check_sampling, next_token
from nexus.runtime.stats import StreamStats
from nexus.runtime.surprisal import SURPRISAL_STATE, capture_hidden, logits_from_hidden, token_surprisal


@dataclass
class Generation:
    text: str  # the reply, without a trailing end-of-turn token
    token_ids: list[int]  # every generated token (all of them were fed into the cache)
    stop_reason: str  # "stop" | "eos" | "length"


class InferenceStream:
    def __init__(
        self,
        model,
        tokenizer,
        policy: EvictionPolicy,
        budget: int | str,
        chunk_size: int = 256,
        seed: int = 0,
    ):
        check_supported(model.config)
        self.model = model
        self.tokenizer = tokenizer
        self.policy = policy
        self.chunk_size = chunk_size
        self.seed = seed
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        if chunk_size < 1:
            raise NexusError(f"chunk_size must be >= 1, got {chunk_size}.")
        self.rope_shift = anchor_rope(model, policy.anchor)  # the task anchor's RoPE shift (None without one)
        self.budget = resolve_budget(budget, policy, model.config, self.dtype, chunk_size)
        self.num_layers = model.config.num_hidden_layers
        # per-layer budgets (PyramidKV's pyramid; uniform for every other policy), dense layers excluded
        self.layer_budgets = plan_layer_budgets(policy, self.budget, self.num_layers, chunk_size)
        model.set_attn_implementation(register_attention())
        self.chat = ChatRenderer(tokenizer)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        self.stats = StreamStats(budget=self.budget, policy=policy.describe())
        self._new_cache()

    # --- public API --------------------------------------------------------------------------------------------
    def append(self, item: str | Sequence[int] | dict) -> int:
        """Feed text, token ids or a chat message {"role", "content"}; returns how many tokens were fed."""
        if isinstance(item, dict):
            return self.append_message(item.get("role", ""), item.get("content", ""))
        ids = self._encode(item) if isinstance(item, str) else [int(t) for t in item]
        if ids and self.policy.evicts:
            # up to tau-1 decoded tokens may still wait for their eviction: evict them first, so a chunk always
            # lands on at most `budget` stored tokens and the preallocated buffers never have to grow
            self._evict("decode")
        for start in range(0, len(ids), self.chunk_size):
            self._forward(ids[start : start + self.chunk_size])
            self._after_prefill(len(ids[start : start + self.chunk_size]))
        return len(ids)

    def append_message(self, role: str, content: str) -> int:
        """Append one chat message; only what the template adds for it is fed."""
        return self.append(self.chat.add(role, content))

    def generate(
        self,
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> Generation:
        """Decode into the same cache. Every generated token, the last one included, ends up in the cache."""
        check_sampling(temperature, top_p)
        if self._last_logits is None:
            raise NexusError("The stream is empty; append a prompt before generating.")
        if max_new_tokens < 1:
            raise NexusError(f"max_new_tokens must be >= 1, got {max_new_tokens}.")
        gen = torch.Generator().manual_seed(self.seed + self.stats.decode_tokens if seed is None else seed)
        ids: list[int] = []
        text, reason = "", "length"
        for _ in range(max_new_tokens):
            tok = next_token(self._last_logits, temperature, top_p, gen)
            ids.append(tok)
            self._forward([tok])
            self._after_decode()
            if tok in self.eos_ids:
                reason = "eos"
                break
            new_text = self.tokenizer.decode(ids, skip_special_tokens=False)
            if on_token is not None:
                on_token(new_text[len(text) :])
            text = new_text
            hit = next((s for s in stop if s and s in text), None)
            if hit is not None:
                reason = "stop"
                break
        return Generation(text=text, token_ids=ids, stop_reason=reason)

    def generate_reply(self, max_new_tokens: int, **kwargs) -> Generation:
        """Assistant turn: add the generation prompt, decode, then close the turn the way the template would."""
        self.append(self.chat.generation_prompt())
        result = self.generate(max_new_tokens, **kwargs)
        self.append(self.chat.close_assistant(result.text, ended_by_eos=result.stop_reason == "eos"))
        return result

    def reset(self) -> None:
        """Drop the cache and the chat history (the `reprefill` protocol then re-appends a transcript)."""
        self._new_cache()
        self.chat.reset()
        self.stats.resets += 1
        self.stats.tokens_seen = 0
        self._refresh_stats()

    @property
    def tokens_seen(self) -> int:
        return self.cache.seen

    @property
    def last_logits(self) -> torch.Tensor | None:
        """Next-token logits [V] after the last fed token (None for an empty stream)."""
        return self._last_logits

    # --- internals ---------------------------------------------------------------------------------------------
    def _new_cache(self) -> None:
        # the cache owns the eviction (the same EvictingCache nexus.bounded hands to model.generate); the stream
        # decides when: after every chunk and every tau decoded tokens
        self.cache = EvictingCache(self.num_layers, self.policy, self.layer_budgets, self.budget, self.chunk_size,
                                   seed=self.seed, stats=self.stats)
        if getattr(self.policy, "needs_lines", False):
            self.cache.line_counter = LineCounter(line_break_table(self.tokenizer))
        self.cache.rope_shift = self.rope_shift
        self._head: list[int] = []  # the first policy.anchor token ids fed (anchor_reask feeds them again)
        if self.policy.anchor_reask:
            self.cache.reask = self._reask_head
        self.hook = self.cache.hook
        self.recorder = self.cache.recorder
        self._last_logits: torch.Tensor | None = None

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> None:
        if not ids:
            return
        if self.policy.requires_logit_bias and self.model.config._attn_implementation != ATTENTION_NAME:
            raise NexusError(
                f"The {self.policy.name} policy corrects attention with a per-key logit bias, which only the nexus "
                f"sdpa wrapper applies, but the model runs {self.model.config._attn_implementation!r} attention; "
                f"call model.set_attn_implementation({ATTENTION_NAME!r}) or pick another policy."
            )
        t0 = time.perf_counter()
        with capture_hidden(self.model) if self.policy.needs_surprisal else nullcontext([]) as hidden:
            out = self.model(
                input_ids=torch.tensor([ids], device=self.device),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
                **{RECORDER_KWARG: self.recorder},
            )
        if self.policy.needs_surprisal:  # every fed position but the last, from the same hidden states
            rows = logits_from_hidden(self.model, hidden[-1][:-1])
            self.cache.note_state(SURPRISAL_STATE, token_surprisal(self._last_logits, rows, ids), unknown=0.0)
        self._last_logits = out.logits[0, -1].float()
        if self.policy.anchor_reask and len(self._head) < self.policy.anchor:
            self._head += ids[: self.policy.anchor - len(self._head)]
        self.cache.note_ids(ids)
        self.stats.forward_seconds += time.perf_counter() - t0
        self._refresh_stats()

    @torch.inference_mode()
    def _reask_head(self) -> list[torch.Tensor | None]:
        """Feed the stream's head again after the newest token, keep its queries per layer, and undo the feed: the
        cache, the window of recent queries and the positions are as before (anchor_reask)."""
        if not self._head:
            return [None] * self.num_layers
        window, lengths = list(self.recorder.queries), [(layer.stored, layer.seen) for layer in self.cache.layers]
        self.recorder.capture = [None] * self.num_layers
        try:
            self.model(input_ids=torch.tensor([self._head], device=self.device), cache=self.cache, use_cache=True,
                       logits_to_keep=1, **{RECORDER_KWARG: self.recorder})
            return self.recorder.capture
        finally:
            self.recorder.capture = None
            self.recorder.queries = window
            for layer, (stored, seen) in zip(self.cache.layers, lengths):
                if layer.stored > stored:
                    layer.keep(torch.arange(stored, device=layer.positions.device))
                layer.seen = seen

    @torch.inference_mode()
    def _evict(self, phase: str = "prefill") -> None:
        self.cache.evict(phase)

    @torch.inference_mode()
    def _after_prefill(self, n: int) -> None:
        self.cache.after_prefill(n)

    @torch.inference_mode()
    def _after_decode(self) -> None:
        self.cache.after_decode(1)

    def _refresh_stats(self) -> None:
        self.cache.refresh_stats()
