"""The ground truth for eviction tests: one full forward over the whole sequence with evicted keys masked out.

If the stream's positions and masks are right, its logits after eviction equal this forward's logits for the same
tokens, where each query may see exactly the keys the stream still stored when that query was fed.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "nexus_test_masked"


def _masked_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    masks = kwargs.pop("ref_masks")
    kwargs.pop("is_causal", None)
    mask = masks[module.layer_idx][None, None].to(query.device)
    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling,
                                  is_causal=False, **kwargs)


AttentionInterface.register(NAME, _masked_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


class VisibilityLog:
    """Records, for every forward the stream makes, which stored positions each layer held before it."""

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self.steps: list[tuple[int, int, list[torch.Tensor]]] = []  # (start, end, positions per layer)

    def before(self, stream, n_new: int) -> None:
        start = stream.tokens_seen
        self.steps.append((start, start + n_new, [layer.positions.clone() for layer in stream.cache.layers]))

    def feeds(self) -> list[tuple[int, int]]:
        """(start, end) of every forward the stream made: how a twin stream must be fed to round the same way."""
        return [(start, end) for start, end, _ in self.steps]

    def masks(self, total: int) -> list[torch.Tensor]:
        masks = [torch.zeros(total, total, dtype=torch.bool) for _ in range(self.num_layers)]
        for start, end, stored in self.steps:
            causal = torch.tril(torch.ones(end - start, end - start, dtype=torch.bool))
            for layer, positions in enumerate(stored):
                masks[layer][start:end, positions.cpu()] = True
                masks[layer][start:end, start:end] = causal
        return masks


@torch.inference_mode()
def masked_full_forward(model, ids: list[int], masks: list[torch.Tensor]) -> torch.Tensor:
    """Logits [T, V] of one uncached forward over `ids` where layer l's query t sees keys masks[l][t]."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        device = next(model.parameters()).device
        out = model(input_ids=torch.tensor([ids], device=device), use_cache=False, ref_masks=masks)
    finally:
        model.set_attn_implementation(previous)
    return out.logits[0].float()


# --- tolerances from this machine's own rounding ---------------------------------------------------------------
# fp32 results differ between CPUs (BLAS kernels, thread counts), so a fixed absolute tolerance is a coin toss
# across machines. The noise floor is measured in the same test on the same machine: a DENSE stream fed exactly like
# the stream under test against the same uncached reference forward differs only by rounding (chunked vs one-shot
# reductions). Eviction changes which keys a query sees, not how the arithmetic is done, so its rounding error is of
# the same order (measured on the embedded model: 5.7e-5 evicted vs 5.5e-5 dense floor), while one evicted key
# leaking into attention in every layer moves the logits by 0.1 to 1.6 (three positions tried).
FLOOR_FACTOR = 8.0
ULP_FACTOR = 4.0  # lower bound in ulps (model dtype) of the largest logit, where the floor is exactly 0


def worst_difference(ref: torch.Tensor, logits: list[tuple[int, torch.Tensor]]) -> float:
    return max(float((ref[t] - got).abs().max()) for t, got in logits)


def causal_masks(num_layers: int, total: int) -> list[torch.Tensor]:
    causal = torch.tril(torch.ones(total, total, dtype=torch.bool))
    return [causal] * num_layers


def tolerance(model, tok, fed: list[int], feeds: list[tuple[int, int]], seen: list[int]) -> float:
    """FLOOR_FACTOR x the rounding noise of a dense stream fed `fed` in the same pieces (`feeds`: (start, end)
    of each append) and compared at the same positions `seen`, against the masked reference forward."""
    from nexus.runtime import InferenceStream, make_policy

    dense = InferenceStream(model, tok, make_policy("dense"), budget=len(fed) + 1,
                            chunk_size=max(e - s for s, e in feeds))
    logits = []
    for start, end in feeds:
        dense.append(fed[start:end])
        if end - 1 in seen:
            logits.append((end - 1, dense.last_logits.clone()))
    ref = masked_full_forward(model, fed, causal_masks(model.config.num_hidden_layers, len(fed)))
    floor = worst_difference(ref, logits)
    ulp = torch.finfo(next(model.parameters()).dtype).eps * float(ref.abs().max())
    return max(FLOOR_FACTOR * floor, ULP_FACTOR * ulp)


def leak_one_evicted_key(masks: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
    """The masks with the earliest key that every layer evicted made visible again to every later query: what a
    stream whose mask let one evicted key through would compute."""
    hidden = torch.stack([~m[-1] for m in masks]).all(0)
    hidden[-1] = False
    position = int(hidden.nonzero()[0])
    leaked = []
    for m in masks:
        m = m.clone()
        m[position + 1 :, position] = True
        leaked.append(m)
    return leaked, position
