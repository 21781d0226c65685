"""A stream's settings checked without loading weights: a mistake is one sentence in about a second, not after
the model has loaded (~11 s) or after a whole prefill."""

from __future__ import annotations

from typing import Any

from nexus.errors import NexusError

# model specs without a model (the agent's scripted backend replies from a file)
NO_MODEL_PREFIXES = ("scripted:",)
# model specs that stream through the embedded model (replayed turns)
EMBEDDED_PREFIXES = ("replay:", "replay-run:")


def streamed_model(model: str) -> str | None:
    """The model whose stream a `--model` value builds, or None when it builds none."""
    if model.startswith(NO_MODEL_PREFIXES):
        return None
    return "embedded" if model.startswith(EMBEDDED_PREFIXES) else model


def check_stream_settings(model: str, policy: str, params: dict[str, Any], budget: int | str, chunk_size: int,
                          device: str | None = None, dtype: str | None = None) -> None:
    """Policy and parameters, budget, chunk size, device, dtype, the model's config and tokenizer: every check a
    stream would make, in the order a user would fix them, reading only the model's config."""
    from nexus.runtime.budget import budget_option

    budget = budget_option(str(budget))  # no torch needed: the cheapest checks first
    if chunk_size < 1:
        raise NexusError(f"--chunk-size must be >= 1, got {chunk_size}.")
    from nexus.runtime.policies import make_policy  # torch, not transformers

    pol = make_policy(policy, **params)
    from nexus.runtime.bounded import plan_layer_budgets  # transformers from here on
    from nexus.runtime.budget import resolve_budget
    from nexus.runtime.model_loading import model_config, resolve_device, resolve_dtype

    dt = resolve_dtype(dtype, resolve_device(device))
    name = streamed_model(model)
    if name is None:
        return
    config = model_config(name)
    tokens = resolve_budget(budget, pol, config, dt, chunk_size)
    plan_layer_budgets(pol, tokens, config.num_hidden_layers, chunk_size)
