"""Token surprisal for eviction: how unpredictable each fed token was, -log p(token | what the stream held before).

Why a cache would want it: a question-agnostic policy can keep a fact that nothing re-references only if the fact
stands out when it arrives. Attention does not single such a line out (docs/results.md, the long-stream studies),
but the model's own surprise does: a name or value it could not predict from the context is information that the
context cannot give back once it is evicted, while boilerplate the model predicts can be. Pruning a prompt by
self-information is Selective Context's idea (Li et al., 2023); here it ranks whole lines of a stream's history.
The score is computed once, from the forward that feeds the token, so it never changes afterwards:
a top slice by it is the same set at every event, and the same in every layer.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

SURPRISAL_STATE = "surprisal"  # token_state key: float32 nats per stored token (0: unknown, fed without logits)


def token_surprisal(prev_logits: torch.Tensor | None, rows: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """[n] nats of each of the n fed `ids`. prev_logits [V]: the logits before this forward (None for the stream's
    first token, which gets 0); rows [n - 1, V]: this forward's logits at the fed positions but the last (row i
    predicts ids[i + 1])."""
    rows = rows.float()
    if prev_logits is not None:
        rows = torch.cat([prev_logits.float().to(rows.device)[None], rows])
    target = torch.tensor(ids[len(ids) - rows.shape[0]:], dtype=torch.long, device=rows.device)
    nll = -torch.log_softmax(rows, dim=-1).gather(1, target[:, None]).squeeze(1)
    if prev_logits is None:
        nll = torch.cat([nll.new_zeros(1), nll])
    return nll.cpu()


def logits_from_hidden(model, hidden: torch.Tensor) -> torch.Tensor:
    """The model's logits for final hidden states [n, H] (its lm_head and any final soft-capping), float32."""
    logits = model.get_output_embeddings()(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


@contextmanager
def capture_hidden(model) -> Iterator[list[torch.Tensor]]:
    """Collect the decoder's final hidden states [n, H] of every forward while entered. The stream takes its
    surprisal rows from these instead of asking the model for every position's logits (logits_to_keep=0): the
    lm_head over n rows is not bit-equal to it over one, and the last row's logits must stay exactly as without
    the slice."""
    rows: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        rows.append(hidden[0].detach())

    handle = model.get_decoder().register_forward_hook(hook)
    try:
        yield rows
    finally:
        handle.remove()
