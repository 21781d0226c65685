"""Line-aligned units for `nexus` unit="line": which stored tokens form one unit, and how units fill a budget."""

from __future__ import annotations

import torch

from nexus.runtime.lines import LINE_STATE
from nexus.runtime.surprisal import SURPRISAL_STATE


def line_units(line: torch.Tensor, forced: torch.Tensor, max_line: int
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """line [S] line index per stored token (-1 unknown), forced [S] bool. A unit is a run of stored tokens of one
    line and one forced state, cut every max_line tokens (an unknown line counts as one long line). Returns
    (unit index per token [S], unit sizes [U], unit forced [U])."""
    stored = line.numel()
    if stored == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty, torch.zeros(0, dtype=torch.bool)
    run_start = torch.ones(stored, dtype=torch.bool)
    run_start[1:] = (line[1:] != line[:-1]) | (forced[1:] != forced[:-1])
    starts = run_start.nonzero().flatten()
    run = torch.cumsum(run_start.long(), 0) - 1
    offset = torch.arange(stored) - starts[run]
    unit = torch.cumsum((run_start | (offset % max_line == 0)).long(), 0) - 1
    sizes = torch.bincount(unit)
    unit_forced = torch.zeros(sizes.numel(), dtype=torch.bool).index_fill_(0, unit[forced], True)
    return unit, sizes, unit_forced


def fill_in_order(order: torch.Tensor, sizes: torch.Tensor, room: int) -> torch.Tensor:
    """Indices into `sizes` taken whole in `order` (best first) while they fit in `room` tokens: the longest prefix
    that fits, then, first fit, any later unit still small enough for what is left."""
    ranked = sizes[order]
    fits = torch.cumsum(ranked, 0) <= room
    head = int(fits.sum())  # cumsum is increasing, so the units that fit form a prefix
    taken = order[:head].tolist()
    left = room - int(ranked[:head].sum())
    smallest = int(sizes.min()) if sizes.numel() else 0
    for idx, size in zip(order[head:].tolist(), ranked[head:].tolist()):
        if left < smallest:
            break
        if size <= left:
            taken.append(idx)
            left -= size
    return torch.tensor(taken, dtype=torch.long)


def surprising_lines(state: dict[str, torch.Tensor], forced: torch.Tensor, max_line: int, room: int) -> torch.Tensor:
    """Stored-token indices of the unforced line pieces (of at most max_line tokens) with the most summed surprisal,
    taken whole while they fit in `room` tokens (nexus surprise_share). Empty when the layer has no surprisal or
    lines for its tokens (fed by a driver that computes no logits per position, e.g. nexus.bounded)."""
    stored = forced.numel()
    line, nats = state.get(LINE_STATE), state.get(SURPRISAL_STATE)
    if room <= 0 or line is None or nats is None or line.shape[-1] != stored or nats.shape[-1] != stored:
        return torch.zeros(0, dtype=torch.long)
    unit, sizes, unit_forced = line_units(line.cpu(), forced, max_line)
    score = torch.zeros(sizes.numel(), dtype=torch.float64).index_add_(0, unit, nats.cpu().double())
    candidates = (~unit_forced).nonzero().flatten()
    order = candidates[torch.sort(score[candidates], descending=True, stable=True).indices]
    taken = torch.zeros(sizes.numel(), dtype=torch.bool)
    taken[fill_in_order(order, sizes, room)] = True
    return taken[unit].nonzero().flatten()
