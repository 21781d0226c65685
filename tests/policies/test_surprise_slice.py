"""nexus surprise_share: the stream records how surprising each fed token was, and the policy keeps that share of
its scored room as the whole line pieces with the most summed surprisal, at every event, in every layer."""
from __future__ import annotations

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime import stream as stream_module
from nexus.runtime.lines import LINE_STATE
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.nexus_lines import surprising_lines
from nexus.runtime.surprisal import SURPRISAL_STATE, token_surprisal

# predictable lines (the model sees the pattern after a few) around one line it cannot predict
FILLER = "".join(f"    total = total + values[{i}]\n" for i in range(120))
FACT = "# Note: the access code for zorbalex-quin is 583920.\n"


def test_token_surprisal_is_each_fed_tokens_nll() -> None:
    gen = torch.Generator().manual_seed(0)
    prev, logits, ids = torch.randn(50, generator=gen), torch.randn(4, 50, generator=gen), [3, 7, 11, 40]
    got = token_surprisal(prev, logits[:-1], ids)
    rows = torch.cat([prev[None], logits[:-1]])
    want = torch.nn.functional.cross_entropy(rows, torch.tensor(ids), reduction="none")
    assert torch.allclose(got, want, atol=1e-5)
    first = token_surprisal(None, logits[:-1], ids)  # the stream's first token has nothing before it: 0
    assert first[0] == 0 and torch.allclose(first[1:], want[1:], atol=1e-5)


def test_the_slice_takes_the_most_surprising_unforced_lines_whole() -> None:
    line = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    nats = torch.tensor([1.0, 1.0, 1.0, 3.0, 3.0, 2.0, 2.0, 2.0, 2.0, 9.0])  # sums: 3, 6, 8, 9 (line 3 forced)
    forced = torch.zeros(10, dtype=torch.bool)
    forced[9] = True
    state = {LINE_STATE: line, SURPRISAL_STATE: nats}
    assert surprising_lines(state, forced, 32, 6).tolist() == [3, 4, 5, 6, 7, 8]  # line 2 (8), then line 1 (6)
    assert surprising_lines(state, forced, 32, 5).tolist() == [5, 6, 7, 8]  # line 1 no longer fits
    assert surprising_lines(state, forced, 2, 2).tolist() == [3, 4]  # pieces of 2: line 1 (6) beats 4 + 4
    assert surprising_lines({LINE_STATE: line}, forced, 32, 6).numel() == 0  # no surprisal recorded: no slice


def _view(stored: int, state: dict, budget: int) -> LayerView:
    gen = torch.Generator().manual_seed(1)
    keys = torch.randn(3, stored, 16, generator=gen)
    return LayerView(layer_idx=0, keys=keys, values=keys, positions=torch.arange(stored),
                     queries=torch.randn(9, 16, 16, generator=gen), budget=budget, event=2, seed=0, state=state)


def test_a_layer_without_surprisal_is_sampled_as_plain_nexus() -> None:
    plain = make_policy("nexus", hajek=False, surprise_share=0.0).select(_view(300, {}, 120))
    sliced = make_policy("nexus", hajek=False, surprise_share=0.5).select(_view(300, {}, 120))
    assert torch.equal(plain, sliced)


def test_the_slice_is_kept_and_the_budget_holds() -> None:
    line = torch.arange(300) // 10  # 30 lines of 10 tokens
    nats = torch.zeros(300)
    nats[50:60] = 5.0  # line 5 is the surprising one
    policy = make_policy("nexus", hajek=False, surprise_share=0.25)
    keep = policy.select(_view(300, {LINE_STATE: line, SURPRISAL_STATE: nats}, 120))
    assert keep.numel() <= 120 and set(range(50, 60)) <= set(keep.tolist())


@pytest.mark.parametrize("knobs", [{"surprise_share": 1.0}, {"surprise_share": -0.1},
                                   {"surprise_share": 0.25, "block_size": 8}])
def test_bad_knobs_are_refused_in_one_sentence(knobs) -> None:
    with pytest.raises(NexusError, match="surprise_share"):
        make_policy("nexus", **knobs)


def test_line_units_with_the_slice_are_refused() -> None:
    with pytest.raises(NexusError, match="unit='block'"):
        make_policy("nexus_reservoir", unit="line", surprise_share=0.25)


def test_the_stream_records_what_it_fed_and_eviction_keeps_it_aligned(tiny_llama, monkeypatch) -> None:
    model, tokenizer = tiny_llama
    fed = []
    real = stream_module.token_surprisal
    monkeypatch.setattr(stream_module, "token_surprisal", lambda *a: fed.append(real(*a)) or fed[-1])
    stream = InferenceStream(model, tokenizer, make_policy("nexus", surprise_share=0.25), budget=96,
                             chunk_size=32)
    stream.append(tokenizer.encode(FILLER[:1500], add_special_tokens=False))
    every = torch.cat(fed)
    assert every.numel() == stream.tokens_seen and stream.stats.eviction_events > 5
    for layer in stream.cache.layers:
        assert torch.equal(layer.token_state[SURPRISAL_STATE], every[layer.positions.cpu()])


def _fact_stored_in_every_layer(embedded, share: float) -> bool:
    model, tok = embedded
    head, tail = FILLER[:400], FILLER[400:]
    ids = tok.encode(head, add_special_tokens=False)
    lo = len(ids)
    ids += tok.encode(FACT, add_special_tokens=False)
    hi = len(ids) - 1  # the fact's closing newline token may merge with the next line's indent
    ids += tok.encode(tail, add_special_tokens=False)
    stream = InferenceStream(model, tok, make_policy("nexus", surprise_share=share), budget=200, chunk_size=64)
    stream.append(ids)
    assert stream.stats.eviction_events >= 10  # the fact line lives through many events
    want = torch.arange(lo, hi)
    return all(bool(torch.isin(want, layer.positions.cpu()).all()) for layer in stream.cache.layers)


def test_an_unpredictable_line_outlives_many_events_in_every_layer(embedded) -> None:
    assert make_policy("nexus").knobs.surprise_share == 0.5  # the default keeps it
    assert _fact_stored_in_every_layer(embedded, 0.25)
    assert not _fact_stored_in_every_layer(embedded, 0.0)  # plain nexus loses it: the slice is what keeps it


def test_changing_the_default_block_size_drops_the_preset_slice() -> None:
    assert make_policy("nexus", b=16).knobs.surprise_share == 0.0  # the slice needs b=1: no error, no slice
    assert make_policy("nexus", b=1).knobs.surprise_share == 0.5
