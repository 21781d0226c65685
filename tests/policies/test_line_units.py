"""nexus unit="line": the stream records each stored token's source line, and the policy keeps or drops whole lines
(pieces of at most max_line tokens), never over budget, forced tokens always kept."""
from __future__ import annotations

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.lines import LINE_STATE, LineCounter, line_break_table
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.nexus_lines import fill_in_order, line_units

CODE = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7} - len('{'ab' * (i % 5)}')\n" for i in range(60))


def test_units_follow_lines_forced_edges_and_max_line() -> None:
    line = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 2, 2, -1, -1, -1])
    forced = torch.zeros(13, dtype=torch.bool)
    forced[:2] = True  # the sinks cut line 0 in two
    unit, sizes, unit_forced = line_units(line, forced, max_line=3)
    assert unit.tolist() == [0, 0, 1, 2, 2, 2, 3, 3, 4, 4, 5, 5, 5]  # line 1 (5 tokens) is cut after 3
    assert sizes.tolist() == [2, 1, 3, 2, 2, 3] and unit_forced.tolist() == [True] + [False] * 5


def test_fill_takes_the_fitting_prefix_then_first_fit_and_never_overflows() -> None:
    sizes = torch.tensor([3, 2, 5, 1])
    assert fill_in_order(torch.tensor([2, 0, 1, 3]), sizes, 7).tolist() == [2, 1]  # 5, skip 3, then 2
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        sizes = torch.randint(1, 20, (30,), generator=gen)
        room = int(torch.randint(0, 200, (1,), generator=gen))
        taken = fill_in_order(torch.randperm(30, generator=gen), sizes, room)
        assert int(sizes[taken].sum()) <= room and taken.unique().numel() == taken.numel()


def test_line_counter_numbers_lines_across_forwards(tokenizer) -> None:
    ids = tokenizer.encode(CODE, add_special_tokens=False)
    table = line_break_table(tokenizer)
    counter = LineCounter(table)
    lines = torch.cat([counter(ids[:37]), counter(ids[37:])])  # split mid-line: the count carries over
    breaks = [i for i, t in enumerate(ids) if "\n" in tokenizer.decode([t])]
    assert counter.lines == len(breaks) == CODE.count("\n")
    assert lines[0] == 0 and lines[breaks[0]] == 0 and lines[breaks[0] + 1] == 1 and lines[-1] == len(breaks) - 1


def _select(budget: int, line: torch.Tensor, **knobs) -> tuple[torch.Tensor, object]:
    policy = make_policy("nexus_reservoir", unit="line", **knobs)
    stored = line.numel()
    gen = torch.Generator().manual_seed(1)
    keys = torch.randn(2, stored, 8, generator=gen)
    view = LayerView(layer_idx=0, keys=keys, values=keys, positions=torch.arange(stored),
                     queries=torch.randn(4, 16, 8, generator=gen), budget=budget, event=3, seed=0,
                     state={LINE_STATE: line})
    return policy.select(view), policy


@pytest.mark.parametrize("budget", [60, 100, 150])
def test_select_keeps_whole_lines_and_the_forced_tokens(budget: int) -> None:
    line = torch.repeat_interleave(torch.arange(30), torch.tensor([3, 7, 12, 5, 9] * 6))  # 216 tokens, 30 lines
    stored = line.numel()
    keep, policy = _select(budget, line, max_line=16, forced_cap=1.0)
    assert keep.numel() <= budget and torch.equal(keep, keep.sort().values)
    sinks, recent = policy.forced_plan(budget)
    forced = set(range(sinks * policy.block_size)) | set(range(stored - recent, stored))
    assert forced <= set(keep.tolist())
    forced |= set((line == line[stored - recent]).nonzero().flatten().tolist())  # the floor rounds back to its line
    kept_lines = line[keep]
    for lid in kept_lines.unique().tolist():
        tokens = set((line == lid).nonzero().flatten().tolist())
        if not tokens & forced:  # a line the forced set does not cut is kept whole or not at all
            assert tokens <= set(keep.tolist()), f"line {lid} kept in part"
    assert keep.numel() >= budget - 12  # first fit leaves less than the longest line unused


def test_long_lines_are_cut_at_max_line() -> None:
    line = torch.zeros(200, dtype=torch.long)  # one 200-token line
    keep, _ = _select(80, line, max_line=16, forced_cap=1.0)
    scored = keep[(keep >= 8) & (keep < 200 - 32)]  # outside the sinks and the floor (rounded back to a piece)
    assert scored.numel() % 16 == 0 and scored.numel() > 0  # whole 16-token pieces


def test_too_small_budget_names_max_line() -> None:
    with pytest.raises(NexusError, match="max_line 32.*the line piece it falls in.*smaller max_line"):
        make_policy("nexus_reservoir", unit="line").check_budget(150)


def test_line_knobs_are_checked() -> None:
    with pytest.raises(NexusError, match="unit must be one of"):
        make_policy("nexus_reservoir", unit="para")
    with pytest.raises(NexusError, match="does not combine with carry=0.5"):
        make_policy("nexus_reservoir", unit="line", carry=0.5)
    with pytest.raises(NexusError, match="max_line must be"):
        make_policy("nexus_reservoir", unit="line", max_line=0)


def _stream_lines(key_span: int, seed: int, events: int = 30) -> torch.Tensor:
    """Lines of 6 tokens, 3 lines appended per event, evicted to 60 tokens; equal attention everywhere (zero keys),
    so only the reservoir's draws decide. Returns the line index of every token stored at the end."""
    policy = make_policy("nexus_reservoir", unit="line", key_span=key_span, temper=0.0, sink_tokens=0, window=1,
                         recent_tokens=1, forced_cap=1.0, max_line=8)
    line = torch.arange(10).repeat_interleave(6)
    positions = torch.arange(60)
    for event in range(events):
        new = torch.arange(positions.max() + 1, positions.max() + 19)
        positions, line = torch.cat([positions, new]), torch.cat([line, new // 6])
        keys = torch.zeros(1, positions.numel(), 1)
        view = LayerView(layer_idx=2, keys=keys, values=keys, positions=positions, queries=keys[:, -1:],
                         budget=60, event=event, seed=seed, state={LINE_STATE: line})
        keep = policy.select(view)
        positions, line = positions[keep], line[keep]
    return line


def test_persistent_line_keys_keep_whole_early_lines_that_fresh_draws_lose() -> None:
    """key_span with unit="line": one key per line piece for its lifetime, so an early line nothing attends to
    survives with about budget / seen (A-Res over the stream) instead of compounding a lottery per event."""
    early = lambda line: int((line < 10).sum())  # noqa: E731 - tokens of the lines stored before the first event
    fresh = sum(early(_stream_lines(0, seed)) for seed in range(20))
    kept = sum(early(_stream_lines(1, seed)) for seed in range(20))
    # fresh: ~60/78 per event, 0.77**30 ~ 4e-4 of 60 tokens x 20 streams; persistent: ~9 of 100 lines seen are kept
    # (the newest line is forced), ~10% of the 1200 early tokens
    assert fresh < 12 and kept > 60
    for seed in range(3):  # persistent keys still keep lines whole
        line = _stream_lines(1, seed)
        counts = torch.bincount(line)
        assert bool(((counts == 0) | (counts == 6))[:-1].all())


def test_stream_records_lines_and_keeps_them_whole(tiny_llama) -> None:
    model, tok = tiny_llama
    ids = tok.encode(CODE, add_special_tokens=False)
    expected = LineCounter(line_break_table(tok))(ids)
    policy = make_policy("nexus_reservoir", unit="line", max_line=32, forced_cap=1.0)  # every line here is < 32 tokens
    stream = InferenceStream(model, tok, policy, budget=200, chunk_size=64)
    stream.append(ids)
    assert stream.stats.eviction_events > 5
    for layer in stream.cache.layers:
        positions, line = layer.positions, layer.token_state[LINE_STATE]
        assert torch.equal(line, expected[positions])  # every stored token carries its own line index
        sinks, recent = policy.forced_plan(200)
        recent_lines = set(expected[-(recent + 64):].tolist())  # the last chunk may not be evicted yet
        for lid in set(line.tolist()) - set(expected[: sinks * policy.block_size].tolist()) - recent_lines:
            assert int((line == lid).sum()) == int((expected == lid).sum()), "a scored line was kept in part"


def _view(line: torch.Tensor, layer_idx: int, seed: int, hot: int | None = None) -> LayerView:
    stored = line.numel()
    gen = torch.Generator().manual_seed(5)
    keys = 0.1 * torch.randn(2, stored, 8, generator=gen)
    queries = 0.1 * torch.randn(2, 16, 8, generator=gen)
    if hot is not None:  # every window query attends to line `hot`
        keys[:, line == hot] = 3.0
        queries[:] = 3.0
    return LayerView(layer_idx=layer_idx, keys=keys, values=keys, positions=torch.arange(stored), queries=queries,
                     budget=80, event=4, seed=seed, state={LINE_STATE: line})


LINES = torch.repeat_interleave(torch.arange(40), torch.tensor([4, 6, 9, 5] * 10))  # 240 tokens, 40 lines
LOOSE = dict(unit="line", sink_tokens=0, forced_cap=1.0, max_line=16)


@pytest.mark.parametrize("key_span", [0, 1])
def test_shared_draws_make_layers_agree(key_span: int) -> None:
    """Uniform sampling (temper 0): with shared draws every layer keeps the same lines; with per-layer draws they
    differ, so a fact kept in one layer is most likely missing from the others."""
    shared = make_policy("nexus_reservoir", key_span=key_span, temper=0.0, shared_draws=True, **LOOSE)
    own = make_policy("nexus_reservoir", key_span=key_span, temper=0.0, **LOOSE)
    for seed in range(3):
        kept = [shared.select(_view(LINES, layer, seed)) for layer in (0, 7, 19)]
        assert all(torch.equal(kept[0], k) for k in kept[1:])
        apart = [own.select(_view(LINES, layer, seed)) for layer in (0, 7)]
        assert not torch.equal(*apart)


def test_top_share_keeps_what_attention_wants_before_the_reservoir() -> None:
    """unit="line" with top_share: the top slice is taken by the weights themselves, so the one line every query
    attends to is kept at every seed even when the rest is a uniform (temper 0) draw."""
    hot = 5
    with_top = make_policy("nexus_reservoir", top_share=0.5, temper=0.0, **LOOSE)
    uniform = make_policy("nexus_reservoir", temper=0.0, **LOOSE)
    hot_tokens = set((LINES == hot).nonzero().flatten().tolist())
    seeds = range(12)
    assert all(hot_tokens <= set(with_top.select(_view(LINES, 0, s, hot)).tolist()) for s in seeds)
    assert not all(hot_tokens <= set(uniform.select(_view(LINES, 0, s, hot)).tolist()) for s in seeds)
    for s in seeds:
        assert with_top.select(_view(LINES, 0, s, hot)).numel() <= 80


def test_shared_draws_is_checked() -> None:
    with pytest.raises(NexusError, match="shared_draws must be bool"):
        make_policy("nexus_reservoir", shared_draws="yes")
