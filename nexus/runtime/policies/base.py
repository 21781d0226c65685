"""The eviction-policy interface. A policy looks at one layer's stored tokens and says which to keep (or, through
`select_event`, at every layer of one event at once).

Budget accounting is the stream's: after an eviction event every evicting layer stores at most `budget` tokens.
A policy sees the layers only through the views of the current event and keeps no reference to the cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from nexus.errors import NexusError

MODES = ("prefill", "prefill+decode")


@dataclass
class LayerView:
    """What a policy may look at for one layer at one eviction event (batch 1, so no batch dim)."""

    layer_idx: int
    keys: torch.Tensor  # [Hkv, S, D] post-RoPE
    values: torch.Tensor  # [Hkv, S, D]
    positions: torch.Tensor  # [S] original token positions, strictly increasing ([Hkv, S] after per-head keeps)
    queries: torch.Tensor | None  # [Hq, w, D] the last w post-RoPE queries = the last w stored tokens
    budget: int  # keep at most this many tokens
    event: int  # eviction event counter of the stream (for seeding)
    seed: int  # stream seed
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # token-aligned per-layer state
    num_layers: int = 1  # decoder layers of the model (per-layer budgets)
    phase: str = "prefill"  # "prefill" (after an appended chunk) or "decode" (every tau generated tokens)
    # [Hq, A, D] the stream's first A queries (its head: the task), rotated to sit just after the newest stored token,
    # or (anchor_reask) those tokens' queries fed again there; None unless the policy asks for them (`anchor`)
    anchor_queries: torch.Tensor | None = None

    @property
    def logit_bias(self) -> torch.Tensor | None:
        """The additive key bias attention currently applies ([S] or [Hkv, S]; -inf marks padded slots)."""
        return self.state.get("logit_bias")

    @property
    def stored(self) -> int:
        return self.keys.shape[1]

    def rng_seed(self, shared: bool = False) -> int:
        """A 31-bit seed unique to (stream seed, event, layer): reproducible, and fresh at every event. shared: the
        same for every layer (draws the layers agree on)."""
        return _mix_seed(self.seed, self.event, _SHARED_LAYER if shared else self.layer_idx)

    def layer_seed(self, shared: bool = False) -> int:
        """A 31-bit seed unique to (stream seed, layer), the same at every event: for draws that must persist.
        shared: the same for every layer too."""
        return _mix_seed(self.seed, _PERSISTENT_EVENT, _SHARED_LAYER if shared else self.layer_idx)


_PERSISTENT_EVENT = 0x5EED  # the event slot layer_seed hashes in place of a real event counter
_SHARED_LAYER = 0xA11  # the layer slot shared seeds hash in place of a real layer index


def _mix_seed(seed: int, event: int, layer_idx: int) -> int:
    x = (seed * 0x9E3779B1 + event * 0x85EBCA77 + layer_idx * 0xC2B2AE3D) & 0xFFFFFFFFFFFF
    x ^= x >> 17
    x = (x * 0xED5AD4BB) & 0xFFFFFFFF
    return int(x & 0x7FFFFFFF)


class StreamHook:
    """Per-stream helper a policy may attach (see `EvictionPolicy.make_hook`): it sees every attention call of the
    stream (after the cache update, so `keys` include the new tokens) and may publish a certificate."""

    def observe(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor) -> None:
        """query [Hq, q, D], keys [Hkv, S, D], post-RoPE, of one forward of one layer."""

    def certificate(self) -> dict | None:
        return None


class EvictionPolicy(ABC):
    """Subclasses set `name` and implement `select`; everything else has sensible defaults."""

    name: str = ""
    #: how many recent post-RoPE queries per layer the stream must record for `select` (0: none)
    window: int = 0
    #: how many of the stream's first queries per layer it must keep for `select` (LayerView.anchor_queries; 0: none)
    anchor: int = 0
    #: the token offset those queries start at (0: the stream's head; an agent's task follows its system prompt)
    anchor_start: int = 0
    #: instead of keeping those queries, the stream feeds its first `anchor` tokens again before every eviction event
    #: (then drops them) and hands the policy their fresh queries: the task asked again, with the cache as context
    anchor_reask: bool = False
    #: the policy sets a per-key logit bias that attention must apply (needs the nexus sdpa wrapper)
    requires_logit_bias: bool = False
    #: the policy reads the line index of every stored token (token_state "line"; nexus unit="line")
    needs_lines: bool = False
    #: the policy reads how surprising every stored token was when fed (token_state "surprisal", nexus
    #: surprise_share); the stream then computes logits at every fed position
    needs_surprisal: bool = False
    #: short parameter names accepted by `make_policy` (e.g. the paper's symbols) -> constructor names
    aliases: dict[str, str] = {"tau": "decode_period"}

    def __init__(self, mode: str = "prefill+decode", decode_period: int = 16, dense_layers: int = 0):
        if mode not in MODES:
            raise NexusError(f"Unknown eviction mode {mode!r}; use one of {', '.join(MODES)}.")
        if decode_period < 1:
            raise NexusError(f"decode_period (tau) must be >= 1, got {decode_period}.")
        if dense_layers < 0:
            raise NexusError(f"dense_layers must be >= 0, got {dense_layers}.")
        self.mode = mode
        self.decode_period = decode_period
        self.dense_layers = dense_layers

    @property
    def evicts(self) -> bool:
        return True

    @property
    def evicts_during_decode(self) -> bool:
        return self.mode == "prefill+decode"

    def min_budget(self) -> int:
        """The most tokens the forced set (sinks, recent window, ...) can take; the budget must exceed it."""
        return 1

    def check_budget(self, budget: int) -> None:
        """Raise NexusError (one sentence) when this policy cannot run with `budget` tokens per layer."""

    def layer_budget(self, layer_idx: int, num_layers: int, budget: int) -> int:
        """Tokens layer `layer_idx` may keep; per-layer schedules (PyramidKV) must sum to the uniform total."""
        return budget

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        """Stored-token indices this policy always keeps when `stored` tokens are cut down to `budget`."""
        return torch.empty(0, dtype=torch.long)

    def make_hook(self, cache) -> StreamHook | None:
        """A per-stream hook (H2O accumulates attention, nexus_ht certifies); None when the policy needs none."""
        return None

    @abstractmethod
    def select(self, view: LayerView) -> torch.Tensor:
        """Sorted LongTensor of stored-token indices to keep, at most `view.budget` of them."""

    def select_event(self, views: list[LayerView]) -> list[torch.Tensor]:
        """The keeps of one eviction event, one per view (every evicting layer over its budget, in layer order).
        Layer by layer unless a policy decides for all layers at once (nexus joint_layers)."""
        return [self.select(view) for view in views]

    def describe(self) -> dict:
        """Settings as a flat dict (for stats, trajectories and result tables)."""
        return {"policy": self.name, "mode": self.mode, "decode_period": self.decode_period,
                "dense_layers": self.dense_layers}


def sink_and_recent(stored: int, sinks: int, recent: int) -> torch.Tensor:
    """Indices of the first `sinks` and last `recent` tokens (each clipped to what is stored)."""
    sinks = min(sinks, stored)
    recent = min(recent, stored - sinks)
    return torch.cat([torch.arange(sinks), torch.arange(stored - recent, stored)])
