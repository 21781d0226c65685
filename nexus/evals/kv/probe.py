"""Looking inside a stream without changing it: per-position log-probs while feeding, and forks.

The stream only keeps the last position's logits (logits_to_keep=1). To score a held-out continuation we feed it
through the stream's own `append` (so eviction runs exactly as in decode: every tau tokens) and capture the
decoder's final hidden states with a forward hook; the lm_head turns them into logits for every fed position.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch

from nexus.runtime import InferenceStream
from nexus.runtime.surprisal import capture_hidden as _capture_hidden
from nexus.runtime.surprisal import logits_from_hidden as _logits_from_hidden


def fork(stream: InferenceStream) -> InferenceStream:
    """An independent copy of the stream (cache, recorder, policy state, chat history); model and tokenizer shared."""
    memo = {id(stream.model): stream.model, id(stream.tokenizer): stream.tokenizer}
    return copy.deepcopy(stream, memo)


@torch.inference_mode()
def feed_scored(stream: InferenceStream, ids: Sequence[int]) -> torch.Tensor:
    """Feed `ids` and return log-probs [len(ids) + 1, V]: row 0 predicts ids[0] (from before feeding), row i
    predicts ids[i] and the last row predicts the token after them.

    The ids go in chunks of the policy's decode period, with eviction after each chunk, which is what decode does
    (eviction every tau generated tokens); so a policy is scored under the same schedule it runs under.
    """
    if stream.last_logits is None:
        raise ValueError("feed_scored needs a non-empty stream (its first row is the stream's last logits)")
    first = stream.last_logits.float()[None]
    saved = stream.chunk_size
    stream.chunk_size = max(1, min(saved, stream.policy.decode_period))
    try:
        with _capture_hidden(stream.model) as rows:
            stream.append(list(ids))
    finally:
        stream.chunk_size = saved
    logits = _logits_from_hidden(stream.model, torch.cat(rows)) if rows else first[:0]
    return torch.log_softmax(torch.cat([first, logits]), dim=-1)


def predictive_logprobs(stream: InferenceStream, ids: Sequence[int]) -> torch.Tensor:
    """Log-probs [len(ids), V] of the predictions for each of `ids` (teacher forced); the last id is not fed."""
    ids = list(ids)
    if not ids:
        return torch.zeros(0, 0)
    return feed_scored(stream, ids[:-1])


def kl_per_position(ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """KL(ref || got) per row, both given as log-probs [N, V]; exactly 0 where the rows are identical."""
    return (ref.exp() * (ref - got)).sum(-1).clamp_min(0.0)


def token_nll(logprobs: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """-log p(ids[i]) per position from log-probs [N, V] (N == len(ids))."""
    index = torch.tensor(list(ids), dtype=torch.long, device=logprobs.device)[:, None]
    return -logprobs.gather(1, index)[:, 0]


@torch.inference_mode()
def compress_once(model, tokenizer, policy, prompt_ids: Sequence[int], budget: int, seed: int = 0) -> InferenceStream:
    """kvpress's prefill-compression setting on a nexus stream: the whole prompt (question included) in one
    forward with nothing evicted, then one eviction event down to `budget` tokens per layer, scored by the queries
    of the prompt's own last positions. The stream's last logits are the dense prefill's (the first answer token is
    predicted before anything is evicted, as in kvpress); every later token sees the compressed cache. Decode
    evicts every tau tokens after that, as in any stream (answers shorter than tau never trigger it)."""
    from nexus.runtime.bounded import plan_layer_budgets

    ids = [int(t) for t in prompt_ids]
    roomy = len(ids) + policy.min_budget() + policy.decode_period + 1  # nothing is evicted during the prefill
    stream = InferenceStream(model, tokenizer, policy, budget=roomy, chunk_size=len(ids), seed=seed)
    stream.append(ids)
    if policy.evicts:
        layer_budgets = plan_layer_budgets(policy, budget, stream.num_layers, 1)
        stream.budget = stream.cache.budget = stream.stats.budget = budget
        stream.layer_budgets = stream.cache.layer_budgets = layer_budgets
        stream.cache.evict("prefill")
    return stream
