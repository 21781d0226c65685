"""The stream computes what the model computes: dense == generate, big budget == dense, eviction == masked forward."""

from __future__ import annotations

import pytest
import torch

from nexus.runtime import InferenceStream, make_policy
from tests.runtime.reference import (VisibilityLog, leak_one_evicted_key, masked_full_forward, tolerance,
                                    worst_difference)


def random_ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def stream_in_chunks(stream, ids, chunk, log):
    """Append `ids` chunk by chunk, logging visibility; returns the stream's logits after each chunk."""
    logits = []
    for s in range(0, len(ids), chunk):
        piece = ids[s : s + chunk]
        log.before(stream, len(piece))
        stream.append(piece)
        logits.append((s + len(piece) - 1, stream.last_logits.clone()))
    return logits


@pytest.mark.slow
def test_dense_stream_equals_model_generate(embedded):
    model, tok = embedded
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a Python function that adds two numbers."}],
                                     tokenize=False, add_generation_prompt=True)
    ids = tok.encode(prompt, add_special_tokens=False)
    model.set_attn_implementation("sdpa")
    with torch.inference_mode():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    stream = InferenceStream(model, tok, make_policy("dense"), budget=4096, chunk_size=16)
    stream.append(ids)
    out = stream.generate(24)
    assert out.token_ids == ref[: len(out.token_ids)]
    assert len(out.token_ids) == len(ref) or out.stop_reason == "eos"


def test_budget_above_length_equals_dense(tiny):
    model, tok = tiny
    ids = random_ids(700, len(tok))
    dense = InferenceStream(model, tok, make_policy("dense"), budget=4096, chunk_size=128)
    nexus = InferenceStream(model, tok, make_policy("nexus"), budget=4096, chunk_size=128)
    dense.append(ids)
    nexus.append(ids)
    assert nexus.stats.eviction_events == 0
    # the same arithmetic on the same stored keys: equal to the last bit, on any machine
    assert torch.equal(dense.last_logits, nexus.last_logits)
    a = dense.generate(20)
    b = nexus.generate(20)
    assert a.token_ids == b.token_ids
    assert torch.equal(dense.last_logits, nexus.last_logits)


@pytest.mark.parametrize("policy", ["nexus_reservoir", "streaming_llm"])
def test_chunked_prefill_after_eviction_equals_masked_forward(tiny, policy):
    model, tok = tiny
    ids = random_ids(1400, len(tok), seed=1)
    stream = InferenceStream(model, tok, make_policy(policy), budget=400, chunk_size=64, seed=3)
    log = VisibilityLog(model.config.num_hidden_layers)
    logits = stream_in_chunks(stream, ids, 64, log)
    assert stream.stats.eviction_events > 10
    ref = masked_full_forward(model, ids, log.masks(len(ids)))
    tol = tolerance(model, tok, ids, log.feeds(), [t for t, _ in logits])
    worst = worst_difference(ref, logits)
    assert worst <= tol, (worst, tol)


@pytest.mark.parametrize("policy", ["nexus_reservoir", "streaming_llm"])
def test_decode_after_eviction_equals_masked_forward(tiny, policy):
    model, tok = tiny
    ids = random_ids(500, len(tok), seed=2)
    stream = InferenceStream(model, tok, make_policy(policy, decode_period=8), budget=400, chunk_size=64, seed=5)
    log = VisibilityLog(model.config.num_hidden_layers)
    stream_in_chunks(stream, ids, 64, log)
    fed = list(ids)
    decoded = []
    for _ in range(60):
        log.before(stream, 1)
        out = stream.generate(1, temperature=1.0, seed=len(fed))
        fed += out.token_ids
        decoded.append((len(fed) - 1, stream.last_logits.clone()))
    assert stream.stats.decode_tokens == 60
    ref = masked_full_forward(model, fed, log.masks(len(fed)))
    tol = tolerance(model, tok, fed, log.feeds(), [t for t, _ in decoded])
    worst = worst_difference(ref, decoded)
    assert worst <= tol, (worst, tol)


@pytest.mark.slow
def test_embedded_model_eviction_equals_masked_forward(embedded):
    model, tok = embedded
    ids = random_ids(1000, len(tok), seed=4)
    stream = InferenceStream(model, tok, make_policy("nexus_reservoir"), budget=512, chunk_size=128, seed=1)
    log = VisibilityLog(model.config.num_hidden_layers)
    logits = stream_in_chunks(stream, ids, 128, log)
    fed = list(ids)
    for _ in range(20):
        log.before(stream, 1)
        fed += stream.generate(1).token_ids
        logits.append((len(fed) - 1, stream.last_logits.clone()))
    assert stream.stats.eviction_events >= 4
    masks = log.masks(len(fed))
    ref = masked_full_forward(model, fed, masks)
    tol = tolerance(model, tok, fed, log.feeds(), [t for t, _ in logits])
    worst = worst_difference(ref, logits)
    assert worst <= tol, (worst, tol)
    # and the tolerance still catches a mask that lets one evicted key through
    leaked, position = leak_one_evicted_key(masks)
    caught = worst_difference(masked_full_forward(model, fed, leaked), logits)
    assert caught > 10 * tol, (position, caught, tol)
