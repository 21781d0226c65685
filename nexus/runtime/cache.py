"""A KV cache whose layers can drop tokens while keeping their original RoPE positions.

Each `BoundedLayer` stores keys/values in a preallocated buffer (grown by doubling, so appends do not copy the whole
cache every decode step) and knows two lengths:
- tokens SEEN: everything ever appended. `get_seq_length()` reports it, so transformers computes the next token's
  position id as tokens-seen (evicted caches keep original positions).
- tokens STORED: what is in the buffer. `get_mask_sizes()` reports kv_length = stored + query and
  kv_offset = seen - stored, the same contract `DynamicSlidingWindowLayer` uses, so the causal mask is sized to
  what is stored.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from nexus import kernels

# token_state key of the additive per-key attention-logit bias ([S] shared by heads, or [Hkv, S] per KV head).
# The stream hands it to the attention wrapper after every eviction; padded per-head slots hold -inf here.
LOGIT_BIAS = "logit_bias"


class BoundedLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, initial_capacity: int = 256):
        super().__init__()
        self.initial_capacity = max(1, initial_capacity)
        self.seen = 0
        self.stored = 0
        self._k_buf: torch.Tensor | None = None
        self._v_buf: torch.Tensor | None = None
        # [S] while all heads keep the same tokens; [Hkv, S] once a per-head policy kept different ones per head
        self.positions = torch.zeros(0, dtype=torch.long)
        # Per-token state a policy keeps aligned with the stored tokens (e.g. H2O's accumulated attention);
        # tensors whose last dim is `stored` are gathered on eviction together with the keys.
        self.token_state: dict[str, torch.Tensor] = {}

    # --- transformers' layer contract -------------------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        if b != 1:
            raise ValueError("nexus streams hold one sequence (batch size 1); run one stream per sequence.")
        self.device = key_states.device
        self._k_buf = key_states.new_empty((1, h, self.initial_capacity, d))
        self._v_buf = value_states.new_empty((1, value_states.shape[1], self.initial_capacity, value_states.shape[3]))
        self.positions = self.positions.to(self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._own_buffers()
        n = key_states.shape[-2]
        self._ensure_capacity(self.stored + n)
        self._k_buf[:, :, self.stored : self.stored + n] = key_states
        self._v_buf[:, :, self.stored : self.stored + n] = value_states
        new_pos = torch.arange(self.seen, self.seen + n, device=self.positions.device)
        if self.positions.dim() == 2:
            new_pos = new_pos.expand(self.positions.shape[0], n)
        self.positions = torch.cat([self.positions, new_pos], dim=-1)
        self.seen += n
        self.stored += n
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.stored + query_length, self.seen - self.stored

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.__init__(self.initial_capacity)

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("an evicting cache cannot be rolled back; use one stream per attempt.")

    # --- what the stream and the policies use ------------------------------------------------------------------
    @property
    def keys(self) -> torch.Tensor | None:  # type: ignore[override]
        return None if self._k_buf is None else self._k_buf[:, :, : self.stored]

    @keys.setter
    def keys(self, value) -> None:  # the base __init__ assigns None; storage lives in the buffers
        pass

    @property
    def values(self) -> torch.Tensor | None:  # type: ignore[override]
        return None if self._v_buf is None else self._v_buf[:, :, : self.stored]

    @values.setter
    def values(self, value) -> None:
        pass

    @property
    def allocated_bytes(self) -> int:
        """Bytes actually allocated for this layer's K and V buffers."""
        if self._k_buf is None:
            return 0
        return self._k_buf.numel() * self._k_buf.element_size() + self._v_buf.numel() * self._v_buf.element_size()

    @property
    def stored_bytes(self) -> int:
        """Bytes holding useful tokens: padded per-head slots (bias -inf) are allocated but not counted here."""
        if self._k_buf is None:
            return 0
        heads, cap = self._k_buf.shape[1], self._k_buf.shape[2]
        return self.allocated_bytes * self.useful_slots // (heads * cap)

    @property
    def useful_slots(self) -> int:
        """Stored (head, token) slots that attention can see, summed over KV heads."""
        if self._k_buf is None:
            return 0
        heads = self._k_buf.shape[1]
        bias = self.token_state.get(LOGIT_BIAS)
        if bias is None or bias.dim() != 2:
            return heads * self.stored
        padded = int(torch.isneginf(bias).sum())  # tokens appended after the bias was set are all useful
        return heads * self.stored - padded

    def reserve(self, capacity: int) -> None:
        """Pre-size the buffers (the stream knows its peak: budget + one chunk), so they never grow mid-stream.
        Exactly that size: the default initial capacity would otherwise round a small layer budget up."""
        self.initial_capacity = max(1, capacity)
        if self.is_initialized:
            self._ensure_capacity(capacity, exact=True)

    def keep(self, indices: torch.Tensor) -> None:
        """Keep only the stored tokens at `indices`, in place; positions and state follow.

        indices: [K] sorted ascending (all heads keep the same tokens), or [Hkv, K] sorted per row (each KV head
        keeps its own tokens). A per-head row may end in -1 entries when heads keep different counts: the buffer
        stays rectangular [Hkv, K] (that is what is allocated) and the padded slots get a -inf logit bias so
        attention never sees them.
        """
        old = self.stored
        self._own_buffers()
        self.align_bias()
        padded = None
        if indices.dim() == 2:
            padded = indices < 0
            if bool(padded.all(dim=1).any()):
                raise ValueError("every KV head must keep at least one token")
            # a padded slot repeats its row's last real index (rows stay sorted; the slot is masked below)
            last = torch.where(padded, -1, indices).max(dim=1, keepdim=True).values
            indices = torch.where(padded, last, indices)
            if not bool(padded.any()):
                padded = None
        # into the layer's own buffers: on CUDA an in-place Triton gather (no temporary), on CPU via a temporary
        kernels.compact_kv_into(self.keys, self.values, indices, self._k_buf, self._v_buf)
        self.stored = indices.shape[-1]
        self.positions = self._gather(self.positions, indices)
        for name, tensor in list(self.token_state.items()):
            if tensor.shape[-1] == old:
                self.token_state[name] = self._gather(tensor, indices)
        if padded is not None:
            bias = self.token_state.get(LOGIT_BIAS)
            if bias is None:
                bias = torch.zeros(padded.shape, dtype=torch.float32, device=padded.device)
            elif bias.dim() == 1:
                bias = bias.expand(padded.shape).clone()
            self.token_state[LOGIT_BIAS] = bias.masked_fill(padded.to(bias.device), float("-inf"))

    def align_bias(self) -> torch.Tensor | None:
        """Extend the logit bias with zeros over tokens appended since it was set (they carry no correction)."""
        bias = self.token_state.get(LOGIT_BIAS)
        if bias is not None and bias.shape[-1] < self.stored:
            bias = torch.nn.functional.pad(bias, (0, self.stored - bias.shape[-1]))
            self.token_state[LOGIT_BIAS] = bias
        return bias

    @staticmethod
    def _gather(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """tensor [..., S] or [Hkv, S]; indices [K] or [Hkv, K] (per head)."""
        indices = indices.to(tensor.device)
        if indices.dim() == 1:
            return tensor[..., indices]
        if tensor.dim() == 1:
            tensor = tensor.expand(indices.shape[0], tensor.shape[0])
        if tensor.dim() != 2 or tensor.shape[0] != indices.shape[0]:
            raise ValueError(f"per-head keep needs per-head state [Hkv, S], got {tuple(tensor.shape)}")
        return tensor.gather(1, indices)

    def _own_buffers(self) -> None:
        """Buffers written inside torch.inference_mode (an InferenceStream's forwards) are inference tensors, which
        cannot be written in place outside it; copy them once into ordinary tensors when that happens (e.g. a stream's
        cache handed to a plain `model.generate`, which runs under no_grad)."""
        if self._k_buf is not None and self._k_buf.is_inference() and not torch.is_inference_mode_enabled():
            self._k_buf, self._v_buf = self._k_buf.clone(), self._v_buf.clone()

    def _ensure_capacity(self, needed: int, exact: bool = False) -> None:
        cap = self._k_buf.shape[2]
        if needed <= cap:
            return
        new_cap = needed if exact else max(needed, 2 * cap)
        for name in ("_k_buf", "_v_buf"):
            old = getattr(self, name)
            buf = old.new_empty((1, old.shape[1], new_cap, old.shape[3]))
            buf[:, :, : self.stored] = old[:, :, : self.stored]
            setattr(self, name, buf)


class BoundedCache(Cache):
    """One `BoundedLayer` per decoder layer."""

    @property
    def is_compileable(self) -> bool:  # eviction changes shapes between steps: never a static (compiled) cache
        return False

    def __init__(self, num_layers: int, initial_capacity: int = 256):
        super().__init__(layers=[BoundedLayer(initial_capacity) for _ in range(num_layers)])

    @property
    def seen(self) -> int:
        return self.layers[0].seen if self.layers else 0

    def stored_lengths(self) -> list[int]:
        return [layer.stored for layer in self.layers]

    def allocated_bytes(self) -> int:
        return sum(layer.allocated_bytes for layer in self.layers)

    def stored_bytes(self) -> int:
        return sum(layer.stored_bytes for layer in self.layers)
