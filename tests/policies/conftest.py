"""Fixtures for the policy suite: tiny random-weight models with the embedded model's GQA geometry and with MHA."""

from __future__ import annotations

import pytest
import torch

GEOMETRIES = {"gqa": (9, 3), "mha": (4, 4)}  # (query heads, kv heads); 9/3 is SmolLM2-135M's layout


def geometry_model(kind: str, vocab_size: int, layers: int = 3, head_dim: int = 16, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    hq, hkv = GEOMETRIES[kind]
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hq * head_dim, head_dim=head_dim, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=hq, num_key_value_heads=hkv,
                         max_position_embeddings=8192, eos_token_id=2, bos_token_id=1, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


VOCAB = 1024  # the model's vocab (token ids < VOCAB decode fine with the real tokenizer); small keeps CI fast


@pytest.fixture(scope="module", params=sorted(GEOMETRIES))
def geo(request, tokenizer):
    return request.param, geometry_model(request.param, VOCAB), tokenizer


def random_ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def valid_positions(layer) -> list[torch.Tensor]:
    """Per KV head, the original positions attention can see in this layer (padded per-head slots removed)."""
    heads = layer.keys.shape[1]
    pos = layer.positions.cpu()
    pos = pos.expand(heads, pos.shape[-1]) if pos.dim() == 1 else pos
    bias = layer.token_state.get("logit_bias")
    rows = []
    for h in range(heads):
        keep = torch.ones(pos.shape[1], dtype=torch.bool)
        if bias is not None and bias.dim() == 2:
            b = torch.nn.functional.pad(bias.cpu(), (0, pos.shape[1] - bias.shape[1]))
            keep = ~torch.isneginf(b[h])
        rows.append(pos[h][keep])
    return rows
