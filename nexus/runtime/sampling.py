"""Next-token choice: greedy at temperature 0, else temperature + nucleus (top-p) sampling, seeded."""

from __future__ import annotations

import torch

from nexus.errors import NexusError


def check_sampling(temperature: float, top_p: float) -> None:
    if temperature < 0:
        raise NexusError(f"temperature must be >= 0, got {temperature}.")
    if not 0 < top_p <= 1:
        raise NexusError(f"top_p must be in (0, 1], got {top_p}.")


def next_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """logits [V] (float) -> token id."""
    if temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1:
        sorted_p, order = torch.sort(probs, descending=True)
        cut = torch.cumsum(sorted_p, 0) - sorted_p >= top_p  # drop tokens once the mass before them reaches top_p
        sorted_p[cut] = 0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    choice = torch.multinomial(probs.cpu(), 1, generator=generator)
    return int(choice)
