"""The attention function nexus streams run with: sdpa plus a recorder of the last W post-RoPE queries per layer.

sdpa and flash attention never return attention probabilities, so policies that score tokens by attention
recompute window-vs-cache scores from the recorded queries (SnapKV-style). The function is registered in
transformers' `AttentionInterface` under `ATTENTION_NAME`; the recorder reaches it through the forward kwargs.

It also builds the causal mask itself: after eviction every stored key precedes the new queries, so query i of a
chunk of q sees stored keys j <= kv_len - q + i ("bottom-right" causal). Building it per layer from the real key
length keeps layers with different stored lengths correct (e.g. dense first layers) even though transformers sizes
one shared mask from the first layer.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION_NAME = "nexus_sdpa"
RECORDER_KWARG = "nexus_recorder"

# Called with (layer_idx, query [Hq, q, D], keys [Hkv, S, D]) on every forward; used by policies that accumulate
# scores at every step (H2O).
Observer = Callable[[int, torch.Tensor, torch.Tensor], None]


class WindowRecorder:
    """Keeps, per layer, the last `window` post-RoPE queries [Hq, w, D] (batch 1), and the `anchor` queries of the
    stream from token `anchor_start` on (the task, for policies that score with it: nexus anchor_tokens)."""

    def __init__(self, num_layers: int, window: int, observer: Observer | None = None, anchor: int = 0,
                 anchor_start: int = 0):
        self.window = window
        self.anchor = anchor
        self.anchor_start = anchor_start
        self.fed = [0] * num_layers  # queries recorded per layer so far: where the next forward starts
        self.queries: list[torch.Tensor | None] = [None] * num_layers
        self.anchors: list[torch.Tensor | None] = [None] * num_layers
        # set to a list by a driver that wants every query of the next forward per layer (the re-asked anchor)
        self.capture: list[torch.Tensor | None] | None = None
        self.observer = observer
        # Optional additive per-key logit bias per layer, [S] or [Hkv, S] aligned with stored keys (policies that
        # reweight, e.g. nexus_ht's Hajek correction, or -inf on padded per-head slots).
        self.logit_bias: list[torch.Tensor | None] = [None] * num_layers

    def record(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor) -> None:
        q = query[0].detach()
        if self.capture is not None:  # a probe forward: its queries are handed over, the window is left as it was
            self.capture[layer_idx] = q.clone()
            return
        if self.window > 0:
            prev = self.queries[layer_idx]
            q_keep = q[:, -self.window :]
            if prev is not None and q_keep.shape[1] < self.window:
                q_keep = torch.cat([prev, q_keep], dim=1)[:, -self.window :]
            self.queries[layer_idx] = q_keep.contiguous()
        if self.anchor > 0:
            prev, fed = self.anchors[layer_idx], self.fed[layer_idx]
            lo = max(0, self.anchor_start - fed)
            hi = min(q.shape[1], self.anchor_start + self.anchor - fed)
            if hi > lo:
                head = q[:, lo:hi].clone()
                self.anchors[layer_idx] = head if prev is None else torch.cat([prev, head], dim=1)
        self.fed[layer_idx] += q.shape[1]
        if self.observer is not None:
            self.observer(layer_idx, q, key[0].detach())

    def reset(self) -> None:
        self.queries = [None] * len(self.queries)
        self.anchors = [None] * len(self.anchors)
        self.fed = [0] * len(self.fed)
        self.logit_bias = [None] * len(self.logit_bias)


def bottom_right_causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    rows = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)
    return (torch.arange(kv_len, device=device)[None, :] <= rows)[None, None]


def nexus_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    recorder: WindowRecorder | None = kwargs.pop(RECORDER_KWARG, None)
    kwargs.pop("is_causal", None)
    if query.shape[0] != 1:
        raise ValueError("nexus streams hold one sequence (batch size 1); run one stream per sequence.")
    layer_idx = module.layer_idx
    if recorder is not None:
        recorder.record(layer_idx, query, key)
    q_len, kv_len = query.shape[2], key.shape[2]
    mask = bottom_right_causal_mask(q_len, kv_len, query.device) if q_len > 1 else None
    bias = None
    if recorder is not None and recorder.logit_bias[layer_idx] is not None:
        stored_bias = recorder.logit_bias[layer_idx]
        pad = kv_len - stored_bias.shape[-1]  # tokens appended since the bias was set get no correction
        bias = torch.nn.functional.pad(stored_bias, (0, pad)).to(query.dtype)
        if bias.dim() == 2:  # per KV head [Hkv, S] -> per query head (GQA groups share their KV head's bias)
            bias = bias.repeat_interleave(query.shape[1] // bias.shape[0], dim=0)[None, :, None, :]
        else:
            bias = bias[None, None, None, :]
    return sdpa_attention_forward(
        module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=False, position_bias=bias,
        **kwargs,
    )


def register_attention() -> str:
    """Register the function (idempotent) and return its name for `model.set_attn_implementation`."""
    AttentionInterface.register(ATTENTION_NAME, nexus_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    return ATTENTION_NAME
