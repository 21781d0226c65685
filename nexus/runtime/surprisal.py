"""Token surprisal for eviction: how unpredictable each fed token was, -log p(token | what the stream held before).

Why a cache would want it: a question-agnostic policy can keep a fact that nothing re-references only if the fact
stands out when it arrives. Attention does not single such a line out (docs/results.md, the long-stream studies),
but the model's own surprise does: a name or value it could not predict from the context is information that the
context cannot give back once it is evicted, while boilerplate the model predicts can be. Pruning a prompt by
self-information is Selective Context's idea (Li et al., 2023); here it ranks whole lines of a stream's history.
The score is computed once, from the logits of the forward that feeds the token, so it never changes afterwards:
a top slice by it is the same set at every event, and the same in every layer.
"""

from __future__ import annotations

import torch

SURPRISAL_STATE = "surprisal"  # token_state key: float32 nats per stored token (0: unknown, fed without logits)


def token_surprisal(prev_logits: torch.Tensor | None, logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """[n] nats of each of the n fed `ids`. prev_logits [V]: the logits before this forward (None for the stream's
    first token, which gets 0); logits [n, V]: this forward's logits at every fed position (row i predicts i + 1)."""
    rows = logits[:-1].float()  # row i predicts ids[i + 1]
    if prev_logits is not None:
        rows = torch.cat([prev_logits.float().to(rows.device)[None], rows])
    target = torch.tensor(ids[len(ids) - rows.shape[0]:], dtype=torch.long, device=rows.device)
    nll = -torch.log_softmax(rows, dim=-1).gather(1, target[:, None]).squeeze(1)
    if prev_logits is None:
        nll = torch.cat([nll.new_zeros(1), nll])
    return nll.cpu()
