"""Moving a recorded post-RoPE query to a later position: RoPE is a rotation by position x inv_freq, so rotating a
post-RoPE query by `delta` more gives the query the same token would have had `delta` positions later. nexus's
task anchor (anchor_tokens) uses it to score every eviction event with the task's queries as if the task were
asked again right after the newest stored token, not in the future of every key (which causal attention never
sees)."""

from __future__ import annotations

from typing import Callable

import torch

from nexus.errors import NexusError

RopeShift = Callable[[torch.Tensor, int], torch.Tensor]


def rope_shift(model) -> RopeShift | None:
    """A function (queries [..., D] post-RoPE, delta) -> the queries rotated `delta` positions further, from the
    model's own rotary embedding (transformers' Llama family: model.model.rotary_emb, rotate-half layout); None when
    the model has none."""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is None:
        return None

    def shift(queries: torch.Tensor, delta: int) -> torch.Tensor:
        probe = torch.zeros(1, 1, queries.shape[-1], device=queries.device, dtype=torch.float32)
        cos, sin = rotary(probe, torch.tensor([[delta]], device=queries.device))
        scale = float(getattr(rotary, "attention_scaling", 1.0)) or 1.0  # a pure rotation: undo the amplitude
        cos, sin = (cos[0, 0] / scale).to(queries.dtype), (sin[0, 0] / scale).to(queries.dtype)
        half = queries.shape[-1] // 2
        rotated = torch.cat([-queries[..., half:], queries[..., :half]], dim=-1)
        return queries * cos + rotated * sin

    return shift


def anchor_rope(model, anchor: int) -> RopeShift | None:
    """The shift a policy with a task anchor of `anchor` tokens needs (None without one); one sentence when the
    model has no rotary embedding to take it from."""
    if not anchor:
        return None
    shift = rope_shift(model)
    if shift is None:
        raise NexusError("anchor_tokens needs the model's rotary embedding (model.model.rotary_emb), which this model "
                         "does not have; set anchor_tokens=0.")
    return shift
