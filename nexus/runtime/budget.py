"""Budgets are token counts per layer; a byte size is converted with the model's cache geometry.

One parser for every command: `budget_option` checks a --budget value before any model loads (no torch import);
`parse_budget` turns it into tokens once the model's geometry is known. A byte size caps the bytes actually
allocated: `tokens_for_bytes` leaves room for the chunk (or tau decoded tokens) each layer's buffer is reserved for.
"""

from __future__ import annotations

import re

from nexus.errors import NexusError

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_TOKENS = {"", "tok", "tokens"}
_FORMS = "a token count (1024) or a byte size (64MiB, 1.5GB)"


def _split(budget: int | str) -> tuple[float, str]:
    """(number, unit) of a budget; unit "" for a plain token count."""
    if isinstance(budget, bool):
        raise NexusError(f"Budget {budget!r} is not {_FORMS}.")
    if isinstance(budget, int):
        return float(budget), ""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(budget))
    if not m or m.group(2).lower() not in {*_UNITS, *_TOKENS}:
        raise NexusError(f"Budget {budget!r} is not {_FORMS}.")
    return float(m.group(1)), m.group(2).lower()


def budget_bytes(budget: int | str) -> int | None:
    """The bytes of a byte-size budget ("64MiB" -> 67108864); None for a token count."""
    number, unit = _split(budget)
    return None if unit in _TOKENS else int(number * _UNITS[unit])


def budget_option(text: str) -> int | str:
    """A --budget value, checked before the model loads: tokens as an int, a byte size as the text itself (it
    becomes tokens once the model's geometry is known)."""
    number, unit = _split(text)
    if number <= 0 or (unit in _TOKENS and int(number) < 1):
        raise NexusError(f"Budget {text!r} must be positive: {_FORMS}.")
    return int(number) if unit in _TOKENS else text.strip()


def kv_bytes_per_token(config, dtype) -> int:
    """K and V bytes one token takes across all layers."""
    import torch

    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    itemsize = torch.empty((), dtype=dtype).element_size()
    return config.num_hidden_layers * 2 * kv_heads * head_dim * itemsize


def parse_budget(budget: int | str, config, dtype) -> int:
    """`1024` or "1024" -> 1024 tokens; "64MiB" / "2GB" -> tokens whose K/V take at most that many bytes (no
    room for a chunk: `tokens_for_bytes` is what caps a stream's allocated buffers)."""
    number, unit = _split(budget)
    if unit in _TOKENS:
        tokens = int(number)
    else:
        tokens = int(number * _UNITS[unit]) // kv_bytes_per_token(config, dtype)
    if tokens < 1:
        raise NexusError(f"Budget {budget!r} is less than one token of KV cache; give a larger budget.")
    return tokens


def tokens_for_bytes(budget: str, policy, config, dtype, chunk_size: int) -> int:
    """The largest per-layer token budget whose preallocated buffers fit in a byte-size budget: every layer is
    reserved its budget plus max(chunk_size, tau) tokens of room, so that room comes out of the bytes."""
    if not policy.evicts or policy.dense_layers:
        what = "every layer" if not policy.evicts else f"its first {policy.dense_layers} layers"
        raise NexusError(f"A byte budget ({budget}) caps the cache a policy preallocates, but {policy.name} keeps "
                         f"{what} dense, growing with the text; give the budget in tokens.")
    nbytes, layers = budget_bytes(budget), config.num_hidden_layers
    layer_token_bytes = kv_bytes_per_token(config, dtype) // layers
    room = max(chunk_size, policy.decode_period)

    def allocated(tokens: int) -> int:
        return layer_token_bytes * sum(policy.layer_budget(i, layers, tokens) + room for i in range(layers))

    tokens = nbytes // (layer_token_bytes * layers) - room
    while tokens >= 1 and allocated(tokens) > nbytes:  # per-layer schedules (PyramidKV) may round up
        tokens -= 1
    if tokens < 1:
        raise NexusError(f"Budget {budget} does not hold one token per layer plus the {room} tokens of room each "
                         f"layer keeps for a prefill chunk ({allocated(1)} bytes at least); give a larger budget "
                         "or a smaller --chunk-size.")
    return tokens


def resolve_budget(budget: int | str, policy, config, dtype, chunk_size: int) -> int:
    """Tokens per layer for a stream or bounded cache: a token count as given, a byte size by `tokens_for_bytes`."""
    if budget_bytes(budget) is None:
        return parse_budget(budget, config, dtype)
    return tokens_for_bytes(str(budget), policy, config, dtype, chunk_size)
