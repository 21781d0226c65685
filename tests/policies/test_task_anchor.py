"""nexus anchor_tokens: every eviction event is also scored with the stream's first queries (the task at its head),
moved by RoPE to sit after the newest token (docs/policies.md, benchmarks/nexus_anchor.py)."""

from __future__ import annotations

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.attention import WindowRecorder
from nexus.runtime.bounded import EvictingCache
from nexus.runtime.policies.base import LayerView
from nexus.runtime.rope import rope_shift
from tests.runtime.test_stream_exactness import random_ids


def test_shifting_a_rotated_query_equals_rotating_it_at_the_later_position(tiny_llama):
    model, _ = tiny_llama
    rotary, shift = model.model.rotary_emb, rope_shift(model)
    d = model.config.hidden_size // model.config.num_attention_heads
    q = torch.randn(4, 3, d, generator=torch.Generator().manual_seed(0))

    def rope_at(x, p):
        cos, sin = rotary(torch.zeros(1, 1, d), torch.tensor([[p]]))
        rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
        return x * cos[0, 0] + rot * sin[0, 0]

    assert torch.allclose(shift(rope_at(q, 7), 300), rope_at(q, 307), atol=1e-5)
    assert not torch.allclose(shift(rope_at(q, 7), 300), rope_at(q, 7), atol=1e-2)  # it does move them


def test_the_recorder_keeps_the_first_queries_across_forwards():
    rec = WindowRecorder(num_layers=1, window=2, anchor=5)
    chunks = [torch.arange(3.0).view(1, 1, 3, 1), torch.arange(3.0, 7.0).view(1, 1, 4, 1)]
    for chunk in chunks:
        rec.record(0, chunk, chunk)
    assert rec.anchors[0].flatten().tolist() == [0, 1, 2, 3, 4]  # the head, not the newest
    assert rec.queries[0].flatten().tolist() == [5, 6]
    rec.reset()
    assert rec.anchors[0] is None


def test_the_recorder_takes_the_anchor_from_its_start_across_chunk_edges():
    rec = WindowRecorder(num_layers=2, window=1, anchor=4, anchor_start=5)
    for lo, hi in ((0, 3), (3, 7), (7, 8), (8, 12)):  # the span 5..8 starts in one chunk and ends in two more
        chunk = torch.arange(float(lo), float(hi)).view(1, 1, hi - lo, 1)
        for layer in range(2):
            rec.record(layer, chunk, chunk)
    assert [a.flatten().tolist() for a in rec.anchors] == [[5, 6, 7, 8]] * 2
    rec.reset()
    assert rec.fed == [0, 0] and rec.anchors == [None, None]


def test_an_anchor_recorded_at_its_start_is_moved_to_sit_right_after_the_newest_token():
    cache = EvictingCache(1, make_policy("nexus", anchor_tokens=2, anchor_start=30), [32], 32, 16)
    cache.recorder.anchors[0] = torch.zeros(9, 2, 8)
    moved = []
    cache.rope_shift = lambda q, delta: moved.append(delta) or q
    cache._anchor_queries(0, torch.tensor([0, 1, 99]))
    assert moved == [100 - 30]  # token 30 lands at 100, the position after the newest (99)


def event_view(anchor: torch.Tensor | None, seed: int) -> LayerView:
    """16 stored tokens in blocks of 1 with orthogonal-ish keys; the window looks at the last keys only; token 3
    is the one the anchor asks about."""
    g = torch.Generator().manual_seed(1)
    keys = torch.randn(1, 16, 8, generator=g)
    window = keys[:, -2:] * 4  # recent queries attend to the recent tokens
    return LayerView(layer_idx=0, keys=keys, values=keys, positions=torch.arange(16), queries=window, budget=8,
                     event=seed, seed=seed, anchor_queries=None if anchor is None else anchor)


def test_the_anchor_keeps_what_it_asks_about_and_nothing_else_does():
    knobs = dict(window=2, recent_tokens=2, sink_tokens=0, forced_cap=1.0, hajek=False)
    target = event_view(None, 0).keys[:, 3:4] * 6  # a query that looks for token 3
    plain, anchored = make_policy("nexus", **knobs), make_policy("nexus", anchor_tokens=1, **knobs)
    kept_plain = sum(3 in plain.select(event_view(None, s)).tolist() for s in range(40))
    kept_anchor = sum(3 in anchored.select(event_view(target, s)).tolist() for s in range(40))
    assert kept_anchor == 40
    assert kept_plain < 30  # without the anchor token 3 is a lottery ticket like the others


def test_anchor_knob_refusals():
    with pytest.raises(NexusError, match="anchor_tokens must be an integer >= 0"):
        make_policy("nexus", anchor_tokens=-1)
    with pytest.raises(NexusError, match="needs unit='block'"):
        make_policy("nexus_reservoir", anchor_tokens=8, unit="line")
    with pytest.raises(NexusError, match="set anchor_tokens"):
        make_policy("nexus", anchor_reask=True)
    with pytest.raises(NexusError, match="anchor_start must be an integer >= 0"):
        make_policy("nexus", anchor_tokens=4, anchor_start=-2)
    with pytest.raises(NexusError, match="anchor that is not there"):
        make_policy("nexus", anchor_start=10)
    with pytest.raises(NexusError, match="does not take anchor_start"):
        make_policy("nexus", anchor_tokens=4, anchor_start=10, anchor_reask=True)


def test_reasking_the_head_leaves_the_cache_and_the_window_as_they_were(tiny_llama):
    model, tok = tiny_llama
    stream = InferenceStream(model, tok, make_policy("nexus", anchor_tokens=16, anchor_reask=True), budget=128,
                             chunk_size=32, seed=3)
    stream.append(random_ids(300, len(tok), seed=5))
    before = [(layer.keys.clone(), layer.positions.clone(), layer.seen) for layer in stream.cache.layers]
    window = [q.clone() for q in stream.recorder.queries]
    asked = stream._reask_head()
    assert all(q.shape[1] == 16 for q in asked)  # the head's 16 queries in every layer
    for layer, (keys, positions, seen) in zip(stream.cache.layers, before):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.positions, positions) and layer.seen == seen
    assert all(torch.equal(a, b) for a, b in zip(stream.recorder.queries, window))
    # and they are not the recorded head: asked at the end, with the cache as context
    recorded = InferenceStream(model, tok, make_policy("nexus", anchor_tokens=16), budget=128, chunk_size=32, seed=3)
    recorded.append(random_ids(300, len(tok), seed=5))
    assert not torch.allclose(asked[1], recorded.recorder.anchors[1], atol=1e-3)


def test_a_cache_without_the_models_rotary_refuses_in_one_sentence():
    cache = EvictingCache(1, make_policy("nexus", anchor_tokens=2), [32], 32, 16)
    cache.recorder.anchors[0] = torch.zeros(9, 2, 8)
    with pytest.raises(NexusError, match="needs the model's rotary embedding"):
        cache._anchor_queries(0, torch.arange(40))


def test_only_a_stream_can_reask_a_cache_driven_otherwise_refuses_in_one_sentence():
    cache = EvictingCache(1, make_policy("nexus", anchor_tokens=2, anchor_reask=True), [24], 24, 8)
    keys = torch.randn(1, 3, 40, 8)
    cache.update(keys, keys, 0)
    with pytest.raises(NexusError, match="only an InferenceStream can do"):
        cache.evict()


def test_model_generate_refuses_reask_when_the_block_is_made(tiny_llama):
    import nexus

    with pytest.raises(NexusError, match="model.generate cannot do"):
        nexus.bounded(tiny_llama[0], "nexus", 256, anchor_tokens=8, anchor_reask=True)


def test_a_stream_scores_with_its_head_and_still_keeps_its_budget(tiny_llama):
    model, tok = tiny_llama
    ids = random_ids(700, len(tok), seed=2)
    held = {}
    for anchor, reask, start in ((0, False, 0), (32, False, 0), (32, True, 0), (32, False, 200)):
        stream = InferenceStream(model, tok, make_policy("nexus", anchor_tokens=anchor, anchor_reask=reask,
                                                         anchor_start=start), budget=160, chunk_size=32, seed=3)
        stream.append(ids)
        stream.generate(10, temperature=1.0, seed=1)
        assert stream.stats.eviction_events > 10
        assert max(stream.cache.stored_lengths()) <= 160 + 32
        held[anchor, reask, start] = [layer.positions.tolist() for layer in stream.cache.layers]
        if anchor and not reask:
            assert stream.recorder.anchors[0].shape[1] == anchor
        if reask:
            assert stream.recorder.anchors[0] is None  # nothing kept between events
    # the anchor changes what is kept, re-asking changes it again, and so does where the anchor starts
    assert held[0, False, 0] != held[32, False, 0] != held[32, True, 0]
    assert held[32, False, 200] != held[32, False, 0]
