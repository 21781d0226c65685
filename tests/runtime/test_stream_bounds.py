"""Memory stays bounded however much is streamed, and the stream's bookkeeping is right."""

from __future__ import annotations

import pytest
import torch

from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.budget import kv_bytes_per_token
from tests.runtime.test_stream_exactness import random_ids


@pytest.mark.parametrize("policy", ["nexus", "streaming_llm"])
def test_streaming_8x_budget_stays_bounded_and_flat(tiny, policy):
    model, tok = tiny
    budget, chunk = 400, 64
    stream = InferenceStream(model, tok, make_policy(policy), budget=budget, chunk_size=chunk)
    ids = random_ids(8 * budget, len(tok), seed=7)
    bytes_seen = set()
    for s in range(0, len(ids), 3 * chunk + 5):  # uneven appends: each is split into chunks internally
        stream.append(ids[s : s + 3 * chunk + 5])
        assert stream.stats.tokens_stored <= budget
        assert stream.stats.peak_tokens_stored <= budget + chunk
        bytes_seen.add(stream.stats.cache_bytes)
    out = stream.generate(50)
    assert stream.stats.tokens_stored <= budget + stream.policy.decode_period
    bytes_seen.add(stream.stats.cache_bytes)
    assert len(bytes_seen) == 1, "cache bytes must stay flat once the budget binds"
    assert stream.stats.tokens_seen == len(ids) + len(out.token_ids)
    assert stream.stats.eviction_events > 0 and stream.stats.tokens_evicted > 0
    # every layer keeps its positions strictly increasing and within what was seen
    for layer in stream.cache.layers:
        pos = layer.positions
        assert bool((pos[1:] > pos[:-1]).all()) and int(pos[-1]) == stream.tokens_seen - 1


def test_prefill_after_decode_keeps_buffers_flat(tiny_llama):
    model, tok = tiny_llama
    budget, chunk = 400, 64
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=budget, chunk_size=chunk)
    stream.append(random_ids(600, len(tok)))
    allocated = stream.stats.cache_bytes
    for _ in range(3):
        stream.generate(stream.policy.decode_period - 1)  # leaves tokens waiting for the next decode eviction
        stream.append(random_ids(chunk, len(tok), seed=stream.tokens_seen))
        assert stream.stats.cache_bytes == allocated
        assert stream.stats.peak_tokens_stored <= budget + chunk


def test_dense_grows_linearly(tiny_llama):
    model, tok = tiny_llama
    stream = InferenceStream(model, tok, make_policy("dense"), budget=10**6, chunk_size=128)
    stream.append(random_ids(1000, len(tok)))
    per_token = kv_bytes_per_token(model.config, torch.float32)
    assert stream.stats.tokens_stored == 1000
    assert stream.stats.stored_bytes == 1000 * per_token
    assert stream.stats.cache_bytes >= stream.stats.stored_bytes
    assert stream.stats.eviction_events == 0


def test_budget_as_bytes(tiny_llama):
    model, tok = tiny_llama
    per_token = kv_bytes_per_token(model.config, torch.float32)
    # the buffers hold the budget plus one chunk (64) of room, all within the bytes given
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=f"{512 * per_token}B", chunk_size=64)
    assert stream.budget == 512 - 64
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=f"{per_token * 1000 / 2**20}MiB", chunk_size=64)
    assert stream.budget in (999 - 64, 1000 - 64)  # float rounding of the MiB figure


def test_dense_layers_are_not_evicted(tiny_llama):
    model, tok = tiny_llama
    stream = InferenceStream(model, tok, make_policy("nexus", dense_layers=1), budget=400, chunk_size=64)
    stream.append(random_ids(1200, len(tok)))
    lengths = stream.cache.stored_lengths()
    assert lengths[0] == 1200
    assert all(n <= 400 for n in lengths[1:])


def test_chat_messages_feed_only_the_new_suffix(embedded):
    model, tok = embedded
    stream = InferenceStream(model, tok, make_policy("dense"), budget=4096, chunk_size=64)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    for m in messages:
        stream.append_message(m["role"], m["content"])
    expected = tok.apply_chat_template(messages, tokenize=False)
    assert stream.tokens_seen == len(tok.encode(expected, add_special_tokens=False))
    reply = stream.generate_reply(12)
    stream.append_message("user", "Again.")
    messages += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": "Again."}]
    full = tok.apply_chat_template(messages, tokenize=False)
    # the stream holds the template's rendering of the whole conversation, each part fed exactly once
    fed = stream.stats.prefill_tokens + stream.stats.decode_tokens
    assert fed == stream.tokens_seen
    assert abs(stream.tokens_seen - len(tok.encode(full, add_special_tokens=False))) <= 2  # token-boundary merges
    assert stream.stats.resets == 0


@pytest.mark.parametrize("policy, size", [("nexus", "400KiB"), ("streaming_llm", "0.5MB"), ("pyramidkv", "333KiB")])
def test_a_byte_budget_caps_the_bytes_allocated(tiny_llama, policy, size):
    """Issue 14: "64MiB" used to become 64MiB of budget tokens plus a chunk of room per layer (75.23 MiB)."""
    from nexus.runtime.budget import budget_bytes

    model, tok = tiny_llama
    limit, chunk = budget_bytes(size), 64
    stream = InferenceStream(model, tok, make_policy(policy), budget=size, chunk_size=chunk)
    stream.append(random_ids(3000, len(tok), seed=3))
    stream.generate(40)
    assert stream.stats.eviction_events > 0
    assert stream.stats.peak_cache_bytes <= limit and stream.cache.allocated_bytes() <= limit
    # and it is the largest such budget: one more token per layer would not fit
    per_layer = kv_bytes_per_token(model.config, torch.float32) // model.config.num_hidden_layers
    assert stream.cache.allocated_bytes() + per_layer * model.config.num_hidden_layers > limit


def test_a_byte_budget_is_refused_where_layers_grow_without_bound(tiny_llama):
    from nexus.errors import NexusError

    model, tok = tiny_llama
    for policy in (make_policy("dense"), make_policy("nexus", dense_layers=1)):
        with pytest.raises(NexusError, match="give the budget in tokens"):
            InferenceStream(model, tok, policy, budget="1MiB", chunk_size=64)
    with pytest.raises(NexusError, match="does not hold one token per layer"):
        InferenceStream(model, tok, make_policy("nexus"), budget="20KiB", chunk_size=64)
