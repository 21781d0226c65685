"""The measuring tools: per-position log-probs while feeding, forks that leave the original untouched."""

from __future__ import annotations

import torch

from nexus.evals.kv.probe import feed_scored, fork, kl_per_position, predictive_logprobs, token_nll
from nexus.runtime import InferenceStream, make_policy


def ids(n, vocab, seed=0):
    return torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_feed_scored_rows_match_the_streams_own_logits(tiny):
    model, tok = tiny
    stream = InferenceStream(model, tok, make_policy("streaming_llm"), budget=200, chunk_size=64)
    stream.append(ids(300, len(tok)))
    before = torch.log_softmax(stream.last_logits, -1)
    rows = feed_scored(stream, ids(40, len(tok), seed=1))
    assert rows.shape == (41, len(tok))
    assert torch.equal(rows[0], before)
    assert torch.allclose(rows[-1], torch.log_softmax(stream.last_logits, -1), atol=1e-4)
    assert stream.tokens_seen == 340 and stream.stats.tokens_stored <= 200


def test_teacher_forcing_equals_feeding_one_token_at_a_time(tiny):
    model, tok = tiny
    context, cont = ids(150, len(tok)), ids(20, len(tok), seed=2)
    a = InferenceStream(model, tok, make_policy("dense"), budget=4096, chunk_size=64)
    a.append(context)
    got = predictive_logprobs(a, cont)
    b = InferenceStream(model, tok, make_policy("dense"), budget=4096, chunk_size=64)
    b.append(context)
    want = []
    for t in cont:
        want.append(torch.log_softmax(b.last_logits, -1))
        b.append([t])
    assert torch.allclose(got, torch.stack(want), atol=1e-4)
    assert token_nll(got, cont).shape == (20,)


def test_fork_is_independent_of_the_original(tiny):
    model, tok = tiny
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=400, chunk_size=64, seed=1)
    stream.append(ids(600, len(tok)))
    seen, logits = stream.tokens_seen, stream.last_logits.clone()
    other = fork(stream)
    assert other.model is stream.model and other.cache is not stream.cache
    other.append(ids(100, len(tok), seed=5))
    other.generate(5)
    assert stream.tokens_seen == seen and torch.equal(stream.last_logits, logits)
    # the original continues exactly like a stream that was never forked
    twin = InferenceStream(model, tok, make_policy("nexus"), budget=400, chunk_size=64, seed=1)
    twin.append(ids(600, len(tok)))
    more = ids(80, len(tok), seed=9)
    stream.append(more)
    twin.append(more)
    assert torch.equal(stream.last_logits, twin.last_logits)


def test_kl_is_zero_only_for_identical_rows():
    p = torch.log_softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(0)), -1)
    q = torch.log_softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(1)), -1)
    assert torch.all(kl_per_position(p, p) == 0)
    assert torch.all(kl_per_position(p, q) > 0)
