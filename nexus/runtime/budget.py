"""Budgets are token counts per layer; a byte size is converted with the model's cache geometry."""

from __future__ import annotations

import re

import torch

from nexus.errors import NexusError

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def kv_bytes_per_token(config, dtype: torch.dtype) -> int:
    """K and V bytes one token takes across all layers."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    itemsize = torch.empty((), dtype=dtype).element_size()
    return config.num_hidden_layers * 2 * kv_heads * head_dim * itemsize


def parse_budget(budget: int | str, config, dtype: torch.dtype) -> int:
    """`1024` or "1024" -> 1024 tokens; "64MiB" / "2GB" -> tokens that fit in that many cache bytes."""
    if isinstance(budget, int):
        tokens = budget
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(budget))
        if not m or m.group(2).lower() not in {*_UNITS, "tok", "tokens"}:
            raise NexusError(f"Budget {budget!r} is not a token count (1024) or a byte size (64MiB, 1.5GB).")
        number, unit = float(m.group(1)), m.group(2).lower()
        if unit in ("", "tok", "tokens"):
            tokens = int(number)
        else:
            tokens = int(number * _UNITS[unit]) // kv_bytes_per_token(config, dtype)
    if tokens < 1:
        raise NexusError(f"Budget {budget!r} is less than one token of KV cache; give a larger budget.")
    return tokens
