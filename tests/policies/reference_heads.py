"""Ground truth for per-head and biased caches: one uncached forward where each query head sees exactly the keys its
KV head still stored (and with the logit bias the stream applied) when the stream fed that query."""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "nexus_test_head_bias"


def _biased_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    bias = kwargs["ref_bias"][module.layer_idx].to(query.device)  # [Hkv, T, T] additive, -inf = not visible
    group = query.shape[1] // key.shape[1]
    mask = bias.repeat_interleave(group, dim=0)[None].to(query.dtype)
    out = torch.nn.functional.scaled_dot_product_attention(query, repeat_kv(key, group), repeat_kv(value, group),
                                                           attn_mask=mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, _biased_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


class HeadLog:
    """Before every forward: per layer and KV head, the visible original positions and their logit bias."""

    def __init__(self, num_layers: int, kv_heads: int):
        self.num_layers, self.kv_heads = num_layers, kv_heads
        self.steps: list[tuple[int, int, list]] = []

    def before(self, stream, n_new: int) -> None:
        start = stream.tokens_seen
        layers = []
        for layer in stream.cache.layers:
            if layer.keys is None:
                layers.append(None)
                continue
            pos = layer.positions.cpu()
            pos = pos.expand(self.kv_heads, pos.shape[-1]) if pos.dim() == 1 else pos
            bias = layer.token_state.get("logit_bias")
            bias = torch.zeros(pos.shape) if bias is None else torch.nn.functional.pad(
                bias.cpu().float(), (0, pos.shape[-1] - bias.shape[-1])).expand(pos.shape)
            layers.append((pos.clone(), bias.clone()))
        self.steps.append((start, start + n_new, layers))

    def bias(self, total: int) -> list[torch.Tensor]:
        out = [torch.full((self.kv_heads, total, total), float("-inf")) for _ in range(self.num_layers)]
        for start, end, layers in self.steps:
            causal = torch.tril(torch.ones(end - start, end - start, dtype=torch.bool))
            for idx, stored in enumerate(layers):
                block = out[idx][:, start:end]
                if stored is not None:
                    pos, bias = stored
                    for h in range(self.kv_heads):
                        live = ~torch.isneginf(bias[h])
                        block[h][:, pos[h][live]] = bias[h][live]
                block[:, :, start:end] = torch.where(causal, 0.0, float("-inf"))
        return out


@torch.inference_mode()
def biased_full_forward(model, ids: list[int], bias: list[torch.Tensor]) -> torch.Tensor:
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        out = model(input_ids=torch.tensor([ids]), use_cache=False, ref_bias=bias)
    finally:
        model.set_attn_implementation(previous)
    return out.logits[0].float()
