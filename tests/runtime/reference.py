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
        out = model(input_ids=torch.tensor([ids]), use_cache=False, ref_masks=masks)
    finally:
        model.set_attn_implementation(previous)
    return out.logits[0].float()
