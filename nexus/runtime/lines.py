"""Source lines for line-aligned eviction (`nexus` with unit="line").

A fact in code or a log is a line: the long-stream study found that a planted line is answered only when it
survives whole, and that fixed 8-token blocks split it into independent draws (docs/results.md). A policy that
evicts whole lines needs to know where lines end; the cache records, per stored token, the index of its line (how
many line breaks the stream had fed before it), in the layer's token_state, which eviction compacts with the keys.
"""

from __future__ import annotations

import torch

LINE_STATE = "line"  # token_state key: int64 line index per stored token (-1: fed without ids, line unknown)

_TABLES: dict[tuple, torch.Tensor] = {}


def line_break_table(tokenizer) -> torch.Tensor:
    """Bool [vocab]: True for the token ids whose text holds a newline. Built once per tokenizer (about a second
    for a 49K vocabulary: every id is decoded, which works for any tokenizer, byte-level or not)."""
    key = (type(tokenizer).__name__, getattr(tokenizer, "name_or_path", ""), len(tokenizer))
    table = _TABLES.get(key)
    if table is None:
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        table = torch.tensor(["\n" in text for text in texts], dtype=torch.bool)
        _TABLES[key] = table
    return table


class LineCounter:
    """Turns fed token ids into line indices, across every forward of one stream."""

    def __init__(self, table: torch.Tensor):
        self.table = table
        self.lines = 0  # line breaks fed so far

    def __call__(self, ids) -> torch.Tensor:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten().cpu()
        known = (ids >= 0) & (ids < self.table.numel())
        breaks = torch.zeros_like(ids, dtype=torch.long)
        breaks[known] = self.table[ids[known]].long()
        # a token belongs to the line its break ends: lines completed before it, not counting its own break
        line = self.lines + torch.cumsum(breaks, 0) - breaks
        self.lines += int(breaks.sum())
        return line
