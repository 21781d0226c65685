"""The bounded cache in ordinary Hugging Face code: `nexus.bounded(model, policy, budget)`.

    with nexus.bounded(model, policy="nexus", budget=1024) as bounded:
        out = model.generate(ids, max_new_tokens=256, return_dict_in_generate=True)   # unchanged user code
    out.cache.stored_lengths(), bounded.stats.as_dict()

Design (why this shape): eviction must happen *between* forwards, exactly where `InferenceStream` does it (after
every prefill chunk and every tau decode steps), never inside one (a layer's keys must not change between its cache
update and its attention). So the cache (`EvictingCache`, which owns the policy, budget, recorder and stats and does
the eviction itself, for the stream too) is driven by a pair of forward hooks on the model: the pre-hook hands the
cache's window recorder to the nexus attention function (the same forward kwarg the stream passes), the post-hook
counts what the forward fed and evicts when due. Hooks see every forward whoever makes it (generate, a pipeline,
a direct `model(...)` call with the cache), need no copy of generate's loop, and come off cleanly on exit.
`model.generate` is wrapped only to hand generate an `EvictingCache` and to turn on transformers' own chunked
prefill (`prefill_chunk_size`), so a long prompt is fed chunk by chunk with an eviction after each chunk: the same
chunks, the same evictions and so the same tokens as a stream fed that prompt.
"""

from __future__ import annotations

import inspect
import math
import time
from typing import Callable

import torch

from nexus.errors import NexusError
from nexus.runtime.attention import ATTENTION_NAME, RECORDER_KWARG, WindowRecorder, register_attention
from nexus.runtime.budget import resolve_budget
from nexus.runtime.cache import LOGIT_BIAS, BoundedCache
from nexus.runtime.lines import LINE_STATE, LineCounter
from nexus.runtime.model_loading import check_supported
from nexus.runtime.policies import EvictionPolicy, LayerView, make_policy
from nexus.runtime.rope import RopeShift, anchor_rope
from nexus.runtime.stats import StreamStats

DEFAULT_CHUNK = 256


def plan_layer_budgets(policy: EvictionPolicy, budget: int, num_layers: int, chunk_size: int) -> list[int]:
    """Per-layer budgets (PyramidKV's pyramid, uniform otherwise); NexusError (one sentence) where they cannot work."""
    if chunk_size < 1:
        raise NexusError(f"chunk_size must be >= 1, got {chunk_size}.")
    need = policy.min_budget() + chunk_size
    if policy.evicts and budget < need:
        raise NexusError(
            f"Budget {budget} tokens is smaller than the {policy.name} policy's forced tokens "
            f"({policy.min_budget()}) plus one chunk ({chunk_size}); raise the budget to >= {need} "
            "or lower chunk_size."
        )
    layer_budgets = [policy.layer_budget(i, num_layers, budget) for i in range(num_layers)]
    evicting = layer_budgets[policy.dense_layers :]
    if policy.evicts and evicting and min(evicting) < policy.min_budget():
        raise NexusError(
            f"Budget {budget} tokens gives some layer of the {policy.name} policy only {min(evicting)} "
            f"tokens, fewer than its forced tokens ({policy.min_budget()}); raise the budget."
        )
    if policy.evicts and evicting:
        policy.check_budget(min(evicting))
    return layer_budgets


class EvictingCache(BoundedCache):
    """A `BoundedCache` that knows its policy and budget and evicts itself.

    After every eviction event each evicting layer stores at most its layer budget; between events a layer may hold
    up to max(chunk_size, tau) more (one prefill chunk or tau decoded tokens), and its buffers are preallocated to
    that peak.
    `stats` are the same `StreamStats` an `InferenceStream` keeps.
    """

    def __init__(self, num_layers: int, policy: EvictionPolicy, layer_budgets: list[int], budget: int,
                 chunk_size: int, seed: int = 0, stats: StreamStats | None = None):
        super().__init__(num_layers)
        self.policy = policy
        self.layer_budgets = list(layer_budgets)
        self.budget = budget
        self.chunk_size = chunk_size
        self.seed = seed
        if policy.evicts:
            # peak = budget + one chunk (prefill) or + tau (decode); reserving it keeps buffers from growing
            reserve = max(chunk_size, policy.decode_period)
            for idx in range(policy.dense_layers, num_layers):
                self.layers[idx].reserve(self.layer_budgets[idx] + reserve)
        self.hook = policy.make_hook(self)
        self.recorder = WindowRecorder(num_layers, policy.window,
                                       observer=self.hook.observe if self.hook is not None else None,
                                       anchor=0 if policy.anchor_reask else policy.anchor,
                                       anchor_start=policy.anchor_start)
        # set by a driver that knows the model, for policies that score with the stream's head (policy.anchor)
        self.rope_shift: RopeShift | None = None
        # anchor_reask: set by the stream; feeds the head again and returns its queries per layer, cache unchanged
        self.reask: Callable[[], list[torch.Tensor | None]] | None = None
        self.stats = stats if stats is not None else StreamStats(budget=budget, policy=policy.describe())
        self.since_decode_evict = 0
        # tokens of the current prompt not yet fed (set by `nexus.bounded`'s generate): their forwards are prefill
        self.prefill_left = 0
        # the `nexus.bounded` block whose forward hooks drive this cache (None: its owner, e.g. a stream, does)
        self.driver = None
        # set by a driver that knows the tokenizer, for policies that evict whole source lines (nexus unit=line)
        self.line_counter: LineCounter | None = None

    def note_ids(self, ids) -> None:
        """Record the line index of the tokens just fed (before their eviction event), when a policy needs it."""
        if self.line_counter is not None:
            self.note_state(LINE_STATE, self.line_counter(ids), unknown=-1)

    def note_state(self, name: str, values: torch.Tensor, unknown: float) -> None:
        """Append per-token `values` for the tokens just fed to every evicting layer's token_state[name]; tokens
        stored before them with no value yet (fed by a driver that did not note any) get `unknown`."""
        for layer in self.layers[self.policy.dense_layers:]:
            before = layer.stored - values.numel()
            prev = layer.token_state.get(name)
            if prev is None or prev.shape[-1] != before:
                prev = torch.full((max(before, 0),), unknown, dtype=values.dtype)
            layer.token_state[name] = torch.cat([prev.cpu(), values])[-layer.stored:] if layer.stored else prev

    # --- what a driver calls after each forward ----------------------------------------------------------------
    def after_prefill(self, n: int) -> None:
        """`n` prompt tokens were fed in one forward (a chunk): evict back to budget."""
        self.stats.prefill_tokens += n
        if self.policy.evicts:
            self.evict("prefill")

    def after_decode(self, n: int = 1) -> None:
        """`n` decoded tokens were fed: evict every tau of them."""
        self.stats.decode_tokens += n
        self.since_decode_evict += n
        if self.policy.evicts_during_decode and self.since_decode_evict >= self.policy.decode_period:
            self.evict("decode")

    def after_forward(self, n: int) -> None:
        """Phase from what was fed: tokens of the current prompt, or any forward of more than one token, are a
        prefill chunk; a single token after the prompt is a decode step."""
        if n <= 0:
            return
        if self.prefill_left > 0 or n > 1:
            self.prefill_left = max(0, self.prefill_left - n)
            self.after_prefill(n)
        else:
            self.after_decode(n)

    @torch.no_grad()
    def evict(self, phase: str = "prefill") -> None:
        """One eviction event: every evicting layer over its budget is cut back to it by the policy."""
        self.since_decode_evict = 0
        before = max(self.stored_lengths())
        over = [idx for idx, layer in enumerate(self.layers)
                if idx >= self.policy.dense_layers and layer.stored > self.layer_budgets[idx]]
        if not over:
            return
        t0 = time.perf_counter()  # the re-asked head's forward counts as eviction time
        reasked = None
        if self.policy.anchor_reask:
            if self.reask is None:
                raise NexusError(f"The {self.policy.name} policy re-asks the stream's head before every event "
                                 "(anchor_reask), which only an InferenceStream can do; use one, or set "
                                 "anchor_reask=false.")
            reasked = self.reask()  # held for this event only
        views = []
        for idx in over:
            layer = self.layers[idx]
            layer.align_bias()
            views.append(LayerView(
                layer_idx=idx,
                keys=layer.keys[0],
                values=layer.values[0],
                positions=layer.positions,
                queries=self.recorder.queries[idx],
                budget=self.layer_budgets[idx],
                event=self.stats.eviction_events,
                seed=self.seed,
                state=layer.token_state,
                num_layers=len(self.layers),
                phase=phase,
                anchor_queries=self._anchor_queries(idx, layer.positions, reasked),
            ))
        for idx, keep in zip(over, self.policy.select_event(views), strict=True):
            layer, budget = self.layers[idx], self.layer_budgets[idx]
            keep = keep.to(layer.positions.device)
            # per-head keeps ([Hkv, K], -1 = padding) are held to the same K/V bytes: budget tokens per head on average
            kept = keep.numel() if keep.dim() == 1 else int((keep >= 0).sum()) / keep.shape[0]
            if kept > budget:
                raise RuntimeError(f"{self.policy.name} kept {kept} tokens, over the budget {budget}")
            layer.keep(keep)
            self.recorder.logit_bias[idx] = layer.token_state.get(LOGIT_BIAS)
        self.stats.eviction_events += 1
        self.stats.tokens_evicted += before - max(self.stored_lengths())
        self.stats.eviction_seconds += time.perf_counter() - t0
        self.refresh_stats()

    def _anchor_queries(self, idx: int, positions: torch.Tensor,
                        reasked: list[torch.Tensor | None] | None = None) -> torch.Tensor | None:
        """The layer's recorded head queries, rotated so that head token i sits at newest + 1 + i (the task asked
        again now); they were recorded at positions anchor_start.. (a stream starts at 0). anchor_reask: this
        event's re-asked queries, fed right after the newest token, so already where they should be."""
        if self.policy.anchor_reask:
            return None if reasked is None else reasked[idx]
        anchors = self.recorder.anchors[idx]
        if anchors is None:
            return None
        if self.rope_shift is None:
            raise NexusError(f"The {self.policy.name} policy scores with the stream's first queries (anchor), which "
                             "needs the model's rotary embedding and this cache was not given it; drive the cache "
                             "with an InferenceStream or nexus.bounded, or set anchor_tokens=0.")
        return self.rope_shift(anchors, int(positions.max()) + 1 - self.policy.anchor_start)

    def refresh_stats(self) -> None:
        s = self.stats
        s.tokens_seen = self.seen
        s.tokens_stored = max(self.stored_lengths(), default=0)
        s.cache_bytes = self.allocated_bytes()
        s.stored_bytes = self.stored_bytes()
        s.anchor_bytes = sum(a.numel() * a.element_size() for a in self.recorder.anchors if a is not None)
        s.peak_cache_bytes = max(s.peak_cache_bytes, s.cache_bytes)
        s.peak_tokens_stored = max(s.peak_tokens_stored, s.tokens_stored)
        if self.hook is not None:
            s.certificate = self.hook.certificate()


def _forward_cache(kwargs: dict):
    cache = kwargs.get("cache")
    return cache if cache is not None else kwargs.get("past_key_values")


class Bounded:
    """`nexus.bounded(...)`: while entered, `model` runs the nexus attention function, its generate hands
    transformers an `EvictingCache` and prefills in chunks, and every forward with such a cache evicts when due.
    Arguments are checked when it is created; `cache` / `stats` are those of the latest generate call."""

    def __init__(self, model, policy: str | EvictionPolicy = "nexus", budget: int | float | str = 1024, *,
                 chunk_size: int | None = None, seed: int = 0, **policy_params):
        check_supported(model.config)
        if isinstance(policy, EvictionPolicy):
            if policy_params:
                raise NexusError(f"Policy parameters {sorted(policy_params)} go with a policy name, not with an "
                                 "already built policy.")
            self.policy = policy
        else:
            self.policy = make_policy(policy, **policy_params)
        if self.policy.anchor_reask:
            raise NexusError("anchor_reask=true feeds the stream's head again before every eviction event, which "
                             "model.generate cannot do; use an InferenceStream, or anchor_reask=false (the recorded "
                             "anchor works here).")
        self.rope_shift = anchor_rope(model, self.policy.anchor)  # the task anchor's RoPE shift (None without one)
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                       or chunk_size < 1):
            raise NexusError(f"chunk_size must be an int >= 1, got {chunk_size!r}.")
        self.model = model
        self.seed = seed
        self.num_layers = model.config.num_hidden_layers
        self.dtype = next(model.parameters()).dtype
        self._chunk_size = chunk_size
        self.density: float | None = None
        self.budget: int | None = None
        if isinstance(budget, bool):
            raise NexusError(f"Budget {budget!r} is not a token count, a density in (0, 1] or a byte size.")
        if isinstance(budget, float):
            if not (math.isfinite(budget) and 0 < budget <= 1):
                raise NexusError(f"A float budget is a density (the fraction of the prompt's tokens each layer "
                                 f"keeps) and must be in (0, 1], got {budget}; give a token count as an int.")
            self.density = budget
        else:
            self.budget = resolve_budget(budget, self.policy, model.config, self.dtype,
                                         chunk_size or DEFAULT_CHUNK)
            self.layer_budgets, self.chunk_size = self._plan(self.budget)  # errors now, not at the first generate
        self.cache: EvictingCache | None = None
        self._handles: list = []
        self._entered = False

    # --- budget ------------------------------------------------------------------------------------------------
    def _plan(self, budget: int) -> tuple[list[int], int]:
        chunk = self._chunk_size
        if chunk is None:  # the default chunk shrinks to what a small (e.g. density) budget leaves room for
            chunk = DEFAULT_CHUNK if not self.policy.evicts else max(1, min(DEFAULT_CHUNK,
                                                                            budget - self.policy.min_budget()))
        return plan_layer_budgets(self.policy, budget, self.num_layers, chunk), chunk

    def budget_for(self, prompt_tokens: int) -> int:
        """Tokens per layer for a prompt of `prompt_tokens`: the fixed budget, or floor(density x prompt), >= 1."""
        if self.density is None:
            return self.budget
        return max(1, int(self.density * prompt_tokens + 1e-9))

    def new_cache(self, prompt_tokens: int) -> EvictingCache:
        budget = self.budget_for(prompt_tokens)
        layer_budgets, chunk = (self.layer_budgets, self.chunk_size) if self.density is None else self._plan(budget)
        cache = EvictingCache(self.num_layers, self.policy, layer_budgets, budget, chunk, seed=self.seed)
        cache.driver = self
        cache.rope_shift = self.rope_shift
        return cache

    @property
    def stats(self) -> StreamStats | None:
        return None if self.cache is None else self.cache.stats

    # --- context manager ---------------------------------------------------------------------------------------
    def __enter__(self) -> "Bounded":
        model = self.model
        if getattr(model, "_nexus_bounded", None) is not None:
            raise NexusError("This model is already inside a nexus.bounded block; leave it before entering another.")
        self._previous_attn = model.config._attn_implementation
        self._had_generate = "generate" in vars(model)
        self._previous_generate = vars(model).get("generate")
        original = model.generate
        model.set_attn_implementation(register_attention())
        self._handles = [model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
                         model.register_forward_hook(self._post_forward, with_kwargs=True)]

        def generate(*args, **kwargs):
            return self._generate(original, *args, **kwargs)

        generate.__doc__ = original.__doc__
        model.generate = generate
        model._nexus_bounded = self
        self._entered = True
        return self

    def __exit__(self, *exc) -> None:
        model = self.model
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._had_generate:
            model.generate = self._previous_generate
        else:
            vars(model).pop("generate", None)
        model.set_attn_implementation(self._previous_attn or "sdpa")
        del model._nexus_bounded
        self._entered = False

    # --- hooks -------------------------------------------------------------------------------------------------
    def _driven(self, kwargs: dict) -> EvictingCache | None:
        cache = _forward_cache(kwargs)
        return cache if isinstance(cache, EvictingCache) and cache.driver is self else None

    def _pre_forward(self, module, args, kwargs):
        cache = self._driven(kwargs)
        if cache is None:
            return None
        if cache.policy.requires_logit_bias and module.config._attn_implementation != ATTENTION_NAME:
            raise NexusError(f"The {cache.policy.name} policy needs the nexus attention function, but the model "
                             f"was switched to {module.config._attn_implementation!r} inside nexus.bounded.")
        kwargs.setdefault(RECORDER_KWARG, cache.recorder)
        cache._forward_start = (cache.seen, time.perf_counter())
        return args, kwargs

    def _post_forward(self, module, args, kwargs, output):
        cache = self._driven(kwargs)
        start = getattr(cache, "_forward_start", None) if cache is not None else None
        if start is None:
            return None
        cache._forward_start = None
        seen, t0 = start
        cache.stats.forward_seconds += time.perf_counter() - t0
        cache.refresh_stats()  # before eviction: the peak includes the chunk (or tau tokens) just fed
        cache.after_forward(cache.seen - seen)
        return None

    # --- generate ----------------------------------------------------------------------------------------------
    def _generate(self, original, *args, **kwargs):
        bound = inspect.signature(original).bind_partial(*args, **kwargs)
        extra = dict(bound.arguments.pop("kwargs", {}))
        named = bound.arguments
        input_ids = named.get("inputs")
        if input_ids is None:
            input_ids = extra.get("input_ids")
        if input_ids is None or not torch.is_tensor(input_ids):
            raise NexusError("Under nexus.bounded, generate needs the prompt as a tensor of input_ids "
                             "(inputs_embeds are not supported).")
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise NexusError(f"nexus.bounded generates one sequence at a time (batch size 1), got input_ids of "
                             f"shape {tuple(input_ids.shape)}; call generate once per sequence.")
        mask = extra.get("attention_mask")
        if mask is not None and not bool((mask != 0).all()):
            raise NexusError("nexus.bounded takes one unpadded sequence, but the attention_mask masks some tokens; "
                             "pass the sequence without padding.")
        config = named.get("generation_config") or self.model.generation_config

        def setting(name, default=None):
            return extra.get(name, getattr(config, name, default))

        if (setting("num_beams", 1) or 1) > 1 or (setting("num_beam_groups", 1) or 1) > 1:
            raise NexusError("nexus.bounded does not support beam search (an evicting cache cannot be reordered "
                             "per beam); use greedy decoding or sampling (num_beams=1).")
        if (setting("num_return_sequences", 1) or 1) > 1:
            raise NexusError("nexus.bounded generates one sequence at a time, so num_return_sequences must be 1.")
        if named.get("assistant_model") is not None or setting("prompt_lookup_num_tokens") or \
                setting("assistant_early_exit") or extra.get("assistant_tokenizer") is not None:
            raise NexusError("nexus.bounded does not support assisted or speculative decoding (rejected drafts "
                             "would have to be cut from a cache that evicts).")
        if setting("use_cache", True) is False:
            raise NexusError("nexus.bounded needs use_cache=True: the bounded cache is the point.")
        chunk_given = extra.pop("prefill_chunk_size", None)
        cache = extra.pop("cache", None)
        if cache is None:
            cache = extra.pop("past_key_values", None)
        else:
            extra.pop("past_key_values", None)
        if cache is None:
            cache = self.new_cache(input_ids.shape[1])
        elif not isinstance(cache, EvictingCache):
            raise NexusError(f"Under nexus.bounded generate uses nexus's own bounded cache; pass no cache, or the "
                             f"cache an earlier bounded generate returned, not a {type(cache).__name__}.")
        elif cache.policy.evicts:
            # like InferenceStream.append: decoded tokens still waiting for their eviction go first, so the new
            # prompt's chunks land on at most `budget` stored tokens
            cache.evict("decode")
        chunk = cache.chunk_size
        if chunk_given is not None and chunk_given != chunk:
            raise NexusError(f"Under nexus.bounded the prefill chunk is chunk_size={chunk}; pass chunk_size to "
                             f"nexus.bounded instead of prefill_chunk_size={chunk_given} to generate.")
        cache.prefill_left = max(0, input_ids.shape[1] - cache.seen)
        extra["cache"] = cache
        extra["prefill_chunk_size"] = chunk
        self.cache = cache
        named.update(extra)
        # a cache this block made is always driven by it; another one (a stream's) only for this call, so the
        # stream's own forwards are never evicted twice
        previous, cache.driver = cache.driver, self
        try:
            return original(**named)
        finally:
            cache.prefill_left = 0
            cache.driver = previous


def bounded(model, policy: str | EvictionPolicy = "nexus", budget: int | float | str = 1024, *,
            chunk_size: int | None = None, seed: int = 0, **policy_params) -> Bounded:
    """Keep every layer of `model`'s KV cache within `budget` under unchanged Hugging Face code, while entered.

    budget: tokens per layer (int), a byte size of the whole cache ("64MiB"), or a density (float in (0, 1]):
    each layer keeps floor(density x prompt tokens) of the generate call that creates the cache. chunk_size: the
    prefill chunk (default 256, shrunk where the budget leaves less room). policy_params go to `make_policy`.
    """
    return Bounded(model, policy, budget, chunk_size=chunk_size, seed=seed, **policy_params)
