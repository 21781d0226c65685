"""Nexus Sampling (arXiv 2606.23961): `nexus` (the tuned default) and the presets `nexus_reservoir`, `nexus_paper`,
`nexus_draft`.

Per layer and eviction event:
1. block distribution: the last W post-RoPE queries attend to all stored keys (per head softmax, heads averaged),
   probabilities summed per block of b tokens, each row normalized -> dist [W, blocks]; a = mean of the rows.
2. the indirect term c: either the H-step walk C += (1 + <a_q, C>) * a_q over H window rows (which rows is a knob),
   or the draft's "hub" (column sum of the block sums before row normalization); c = C / ||C||_1.
3. weight w = a + lambda * c + eps * r, r a recency ramp (0 oldest .. 1 newest) that only breaks ties.
4. forced blocks (sinks at the start, the blocks holding the last `recent_tokens` tokens) are kept; the remaining
   budget K is filled by weighted reservoir sampling with n-averaged Efraimidis-Spirakis keys (n="det": top-K),
   optionally after a deterministic top slice of K (`top_share`). design="systematic" instead draws them by
   systematic PPS with known inclusion probabilities pi_j, and hajek=true then adds log(1/pi_j) to the kept
   tokens' logits (the Hajek correction nexus_ht makes per token; later events score with that bias included).
5. joint_layers=true makes step 4's draw once per event for every evicting layer, from the layers' mean weights
   (select_event), so all layers hold the same tokens.
6. anchor_tokens=A adds to w the mean block distribution of the stream's first A queries (its head: the task;
   anchor_start=S takes the A queries from token S on instead, e.g. after an agent's system prompt), recorded once
   and moved by RoPE to sit after the newest token, so every event also asks what the task asks.
The forced set is given in tokens and rounded out to block edges; `forced_cap` caps its share of the budget, so a
small budget shrinks the recency floor (down to the window) and the sinks (down to one block) instead of leaving
nothing to score. Every preset is this class with other knobs (PRESETS), never a copy of the code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from nexus import kernels
from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView
from nexus.runtime.cache import LOGIT_BIAS
from nexus.runtime.lines import LINE_STATE
from nexus.runtime.policies.inclusion import inclusion_probs, systematic_sample
from nexus.runtime.policies.scoring import window_probs
from nexus.runtime.policies.nexus_lines import fill_in_order, line_units, surprising_lines

WALK_ROWS = ("oldest", "newest", "all")
CARRY_STATE = "nexus_carry"  # token_state key of the carried per-token score
PREFILL_SCORES = ("walk", "hub")
UNITS = ("block", "line")
DESIGNS = ("reservoir", "systematic")


@dataclass(frozen=True)
class NexusKnobs:
    block_size: int = 8
    window: int = 16  # W: decode queries scored
    prefill_window: int | None = None  # W during prefill events (the draft: 32); None = window
    walk_steps: int = 3  # H
    walk_rows: str = "oldest"  # which window rows feed the walk: the H oldest, the H newest, or all W in order
    lam: float = 0.5
    n: int | str = 5  # reservoir averaging count; "det" = deterministic top-K
    eps: float = 1e-6
    prefill_score: str = "walk"  # "hub": the draft's column-sum score in prefill events
    top_share: float = 0.0  # share of the scored budget kept deterministically (top by weight) before sampling
    sink_tokens: int = 4
    recent_tokens: int | None = None  # None = the window
    forced_cap: float = 0.25  # the forced set may take at most this share of the budget (1.0: uncapped)
    carry: float = 0.0  # share of each token's previous score kept across events (the older design note's walk
    #                     state kept across steps): 0 = every event scores afresh
    temper: float = 1.0  # the reservoir samples by weight ** temper: 1 as scored, 0 uniform (the top slice, if any,
    #                     is still chosen by the scores themselves)
    key_span: int = 0  # 0: fresh reservoir draws at every event (the paper). s > 0: a unit's (block's or line
    #                    piece's) draws are made once, from its first token's position // s, and reused at every
    #                    event (A-Res over a stream); with unit="line", 1 gives every line piece its own key
    unit: str = "block"  # what is kept or dropped whole: fixed blocks of block_size, or source lines ("line": split
    #                      at max_line tokens; scored per token, sampled by attention per token of the line)
    max_line: int = 32  # unit="line": a longer line is cut into pieces of at most this many tokens
    shared_draws: bool = False  # the reservoir's uniforms are the same in every layer (not drawn per layer), so
    #                             layers whose weights agree keep the same units: a fact kept in all layers or none
    design: str = "reservoir"  # how the scored blocks are drawn: the paper's reservoir (inclusion probabilities
    #                            unknown), or systematic PPS (inclusion.py: pi_j = min(1, c * (w_j + floor * mean
    #                            w)), known exactly)
    hajek: bool = False  # design="systematic" only: a kept sampled block's tokens get log(1/pi_j) added to their
    #                      attention logits (accumulated over events), so attention becomes the Hajek estimator of
    #                      the dense one, as nexus_ht does per token
    floor: float = 0.1  # design="systematic": pi is proportional to w + floor * mean(w), so every block has a chance
    #                     and the 1/pi weights stay bounded
    anchor_tokens: int = 0  # score every event with the stream's first A queries too (its head: the task), rotated
    #                         to sit after the newest token, their mean block distribution added to the weight, so
    #                         what the task asks about is flagged at every event; costs A queries per layer of memory
    anchor_start: int = 0  # where the anchor begins, in tokens from the stream's start: an agent's task message
    #                        follows its system prompt, so the anchor is the A tokens from there on
    anchor_reask: bool = False  # with anchor_tokens: instead of keeping the head's first queries, the stream feeds
    #                             the head again before every event and scores with those fresh queries, which
    #                             see the cache as context (an A-token forward per event; nothing kept between)
    surprise_share: float = 0.0  # share of the scored room (the budget less the forced set) kept as the stored
    #                              lines (pieces of max_line tokens) the model was most surprised by when they
    #                              were fed, by summed surprisal, before the rest is sampled (surprisal.py): a
    #                              fixed score, so the slice persists and is the same in every layer (b=1 only)
    joint_layers: bool = False  # one keep set for every evicting layer at each event, drawn from the mean of the
    #                             layers' weights (with draws shared by all layers), so a token is kept in all
    #                             layers or none; the layers then always hold the same tokens

    def __post_init__(self):
        b = self.block_size
        if isinstance(b, bool) or not isinstance(b, int) or b < 1 or b & (b - 1):
            raise NexusError(f"block_size (b) must be a power of two, got {b!r}.")
        for name in ("window", "prefill_window"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise NexusError(f"{name} must be an integer >= 1, got {v!r}.")
        if not isinstance(self.walk_steps, int) or self.walk_steps < 0:
            raise NexusError(f"walk_steps (H) must be an integer >= 0, got {self.walk_steps!r}.")
        if self.walk_rows not in WALK_ROWS:
            raise NexusError(f"walk_rows must be one of {', '.join(WALK_ROWS)}, got {self.walk_rows!r}.")
        if self.prefill_score not in PREFILL_SCORES:
            raise NexusError(f"prefill_score must be one of {', '.join(PREFILL_SCORES)}, got {self.prefill_score!r}.")
        if self.lam < 0 or self.eps < 0:
            raise NexusError(f"lam (lambda) and eps must be >= 0, got lam={self.lam}, eps={self.eps}.")
        n = self.n
        if n != "det" and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise NexusError(f"n must be an integer >= 1 or 'det' (deterministic top-K), got {n!r}.")
        if not 0 <= self.top_share < 1:
            raise NexusError(f"top_share must be in [0, 1), got {self.top_share}.")
        if not isinstance(self.sink_tokens, int) or self.sink_tokens < 0:
            raise NexusError(f"sink_tokens must be an integer >= 0, got {self.sink_tokens!r}.")
        if self.recent_tokens is not None and (not isinstance(self.recent_tokens, int)
                                               or self.recent_tokens < self.max_window):
            raise NexusError(f"recent_tokens must be an integer >= the window ({self.max_window}): the window's own "
                             f"tokens must stay in the cache; got {self.recent_tokens!r}.")
        if isinstance(self.key_span, bool) or not isinstance(self.key_span, int) or self.key_span < 0:
            raise NexusError(f"key_span must be an integer >= 0 (0: fresh draws at every event), got {self.key_span!r}.")
        if not 0 <= self.temper <= 1:
            raise NexusError(f"temper must be in [0, 1] (1: sample by the scores, 0: uniformly), got {self.temper}.")
        if not 0 <= self.carry < 1:
            raise NexusError(f"carry must be in [0, 1), got {self.carry}.")
        if not 0 < self.forced_cap <= 1:
            raise NexusError(f"forced_cap must be in (0, 1], got {self.forced_cap}.")
        if self.unit not in UNITS:
            raise NexusError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}.")
        if isinstance(self.max_line, bool) or not isinstance(self.max_line, int) or self.max_line < 1:
            raise NexusError(f"max_line must be an integer >= 1, got {self.max_line!r}.")
        if not isinstance(self.shared_draws, bool):
            raise NexusError(f"shared_draws must be true or false, got {self.shared_draws!r}.")
        if self.design not in DESIGNS:
            raise NexusError(f"design must be one of {', '.join(DESIGNS)}, got {self.design!r}.")
        if not isinstance(self.hajek, bool):
            raise NexusError(f"hajek must be true or false, got {self.hajek!r}.")
        if not self.floor > 0:
            raise NexusError(f"floor must be > 0 (it keeps every inclusion probability positive), got {self.floor}.")
        if self.design == "systematic" and (self.unit != "block" or self.key_span):
            raise NexusError("design='systematic' (nexus's default) draws blocks afresh at every event and needs "
                             f"unit='block' and key_span=0, got unit={self.unit!r}, key_span={self.key_span}; "
                             "for those knobs use the reservoir design: policy nexus_reservoir.")
        if self.hajek and self.design != "systematic":
            raise NexusError("hajek=true needs known inclusion probabilities: keep design='systematic', or set "
                             "hajek=false with design='reservoir' (the nexus_reservoir preset has both).")
        if not isinstance(self.joint_layers, bool):
            raise NexusError(f"joint_layers must be true or false, got {self.joint_layers!r}.")
        if self.joint_layers and self.unit != "block":
            raise NexusError("joint_layers=true chooses blocks for all layers at once and needs unit='block', "
                             f"got unit={self.unit!r}.")
        if isinstance(self.anchor_tokens, bool) or not isinstance(self.anchor_tokens, int) or self.anchor_tokens < 0:
            raise NexusError(f"anchor_tokens must be an integer >= 0 (0: no task anchor), got {self.anchor_tokens!r}.")
        if isinstance(self.anchor_start, bool) or not isinstance(self.anchor_start, int) or self.anchor_start < 0:
            raise NexusError(f"anchor_start must be an integer >= 0 (a token offset), got {self.anchor_start!r}.")
        if self.anchor_start and not self.anchor_tokens:
            raise NexusError(f"anchor_start={self.anchor_start} places a task anchor that is not there; set "
                             "anchor_tokens to the task's length in tokens too.")
        if self.anchor_start and self.anchor_reask:
            raise NexusError("anchor_reask=true re-asks the stream's first tokens and does not take anchor_start; "
                             "set anchor_start=0 or anchor_reask=false.")
        if not isinstance(self.anchor_reask, bool):
            raise NexusError(f"anchor_reask must be true or false, got {self.anchor_reask!r}.")
        if self.anchor_reask and not self.anchor_tokens:
            raise NexusError("anchor_reask=true re-asks the stream's first anchor_tokens tokens; set anchor_tokens "
                             "to the length of the head (the task), e.g. anchor_tokens=64.")
        if self.anchor_tokens and self.unit != "block":
            raise NexusError(f"anchor_tokens={self.anchor_tokens} scores blocks and needs unit='block', got "
                             f"unit={self.unit!r}.")
        if not 0 <= self.surprise_share < 1:
            raise NexusError(f"surprise_share must be in [0, 1), got {self.surprise_share}.")
        if self.surprise_share and (self.block_size != 1 or self.unit != "block"):
            raise NexusError(f"surprise_share={self.surprise_share:g} keeps whole lines beside token-level sampling "
                             f"and needs block_size=1 and unit='block' (nexus's own), got block_size="
                             f"{self.block_size}, unit={self.unit!r}.")
        if self.unit == "line" and self.carry:
            raise NexusError(f"unit='line' samples whole lines and does not combine with carry={self.carry}; "
                             "set it to 0 or use unit='block'.")

    @property
    def max_window(self) -> int:
        return max(self.window, self.prefill_window or 0)


# The paper's values (shared/nexus-method.md): 4 sink + 4 recent blocks of 32 and the partial block, uncapped.
PAPER = dict(block_size=32, window=16, walk_steps=3, walk_rows="oldest", lam=0.5, n=5, sink_tokens=128,
             recent_tokens=128, forced_cap=1.0)
# The authors' public draft (Escanord/verl docs/nexus_method.md): b=64, W=16 decode / 32 prefill, n=4, the hub
# score in prefill, 4 sink + 4 recent blocks, the first two layers never evicted.
DRAFT = dict(block_size=64, window=16, prefill_window=32, walk_steps=3, walk_rows="oldest", lam=0.5, n=4,
             prefill_score="hub", sink_tokens=256, recent_tokens=256, forced_cap=1.0, dense_layers=2)
# nexus_reservoir: the study's dev choice with the paper's sampling design (n=5-averaged reservoir keys over
# blocks of 8; docs/results.md, "Nexus study"); the `nexus` default until the hajek-dev stage replaced it. The
# reservoir-only knobs (unit="line", key_span) need it as their base.
RESERVOIR = dict(block_size=8, window=16, walk_steps=3, walk_rows="oldest", lam=0.5, n=5, sink_tokens=4,
                 recent_tokens=16, forced_cap=0.25)
# The default `nexus`: the same walk scores per token (b=1), drawn by systematic PPS with known inclusion
# probabilities and Hajek-corrected in the logits (the hajek-dev stage's choice, docs/results.md "Nexus with known
# inclusion probabilities"), with a recency floor of 64 tokens (the window stage's choice by its declared rule,
# "Every token a query once"; the cap shrinks it at small budgets), and half the scored room kept as the most
# surprising lines (the surprise stage's choice, "Keep what surprised the model").
DEFAULT = dict(RESERVOIR, block_size=1, design="systematic", hajek=True, recent_tokens=64, surprise_share=0.5)


def biased_block_dist(queries: torch.Tensor, view: LayerView, block_size: int, causal: bool = True) -> torch.Tensor:
    """window_block_scores' block distribution [W, blocks] with the layer's logit bias in the softmax (the kernel
    takes no bias): head mean of each row's attention, summed per block, rows normalized. The cache aligns the
    bias with the stored tokens (layer.align_bias) before every event."""
    tokens = window_probs(queries, view.keys, view.positions, view.logit_bias, causal).mean(dim=0)  # [W, S]
    block = (torch.arange(view.stored, device=tokens.device) // block_size)
    dist = tokens.new_zeros(tokens.shape[0], -(-view.stored // block_size)).index_add_(1, block, tokens)
    return dist / dist.sum(dim=1, keepdim=True).clamp_min(1e-30)


def top_and_rest(weights: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the indices of the `top` largest weights, the indices of all the others in order)."""
    order = torch.topk(weights, top).indices if top else weights.new_zeros(0, dtype=torch.long)
    rest = torch.ones(weights.numel(), dtype=torch.bool, device=weights.device)
    rest[order] = False
    return order, rest.nonzero().flatten()


def walk_scores(dist: torch.Tensor, steps: int, rows: str = "oldest") -> torch.Tensor:
    """The walk over the window's block distributions; returns c (sums to 1, or all zeros)."""
    w, nb = dist.shape
    order = {"oldest": [h % w for h in range(steps)],
             "newest": [(w - steps + h) % w for h in range(steps)],
             "all": list(range(w))}[rows]
    acc = torch.zeros(nb, dtype=dist.dtype, device=dist.device)
    for i in order:
        row = dist[i]
        acc = acc + (1.0 + torch.dot(row, acc)) * row
    total = acc.sum()
    return acc / total if total > 0 else acc


def hub_scores(dist: torch.Tensor) -> torch.Tensor:
    """The draft's hub: column sums of the block sums before row normalization, L1-normalized. Our block rows are
    softmax mass over every stored key, so each already sums to 1 and the hub equals the base score a."""
    col = dist.sum(0)
    total = col.sum()
    return col / total if total > 0 else col


def block_weights(dist: torch.Tensor, steps: int, lam: float, eps: float, rows: str = "oldest",
                  hub: bool = False) -> torch.Tensor:
    """w_j = a_j + lam * c_j + eps * r_j."""
    nb = dist.shape[1]
    a = dist.mean(dim=0)
    c = hub_scores(dist) if hub else walk_scores(dist, steps, rows)
    ramp = torch.linspace(0.0, 1.0, nb, dtype=dist.dtype, device=dist.device) if nb > 1 else torch.ones_like(a)
    return a + lam * c + eps * ramp


class NexusPolicy(EvictionPolicy):
    name = "nexus"
    preset: dict = DEFAULT
    # the paper's symbols: b, W, H, lambda (nexus: b=1, W=16, H=3, lam=0.5, tau=16); H=0 ablates the walk
    aliases = {**EvictionPolicy.aliases, "b": "block_size", "W": "window", "H": "walk_steps", "λ": "lam",
               "lambda": "lam"}

    def __init__(self, **params):
        merged = {**self.preset, **params}
        if "surprise_share" not in params and (merged.get("block_size") != 1 or merged.get("unit", "block") != "block"):
            merged["surprise_share"] = 0.0  # the preset's slice needs b=1: a caller who changes b or unit drops it
        base = {k: merged.pop(k) for k in ("mode", "decode_period", "dense_layers") if k in merged}
        # dense_layers defaults to 0 (the draft keeps 2 dense): in an unbounded stream a dense layer grows without
        # limit, which would break the fixed memory budget. nexus_draft sets 2.
        super().__init__(**base)
        known = {f.name for f in fields(NexusKnobs)}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise TypeError(f"unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        self.knobs = NexusKnobs(**merged)
        self.block_size = self.knobs.block_size
        self.window = self.knobs.max_window  # what the stream records for us
        self.anchor = self.knobs.anchor_tokens
        self.anchor_start = self.knobs.anchor_start
        self.anchor_reask = self.knobs.anchor_reask
        self.needs_surprisal = self.knobs.surprise_share > 0
        self.needs_lines = self.knobs.unit == "line" or self.needs_surprisal  # the surprise slice keeps whole lines
        self.requires_logit_bias = self.knobs.hajek  # the correction lives in the attention logits

    # --- the forced set -------------------------------------------------------------------------------------------
    def _forced_size(self, sink_blocks: int, recent: int) -> int:
        """Worst-case forced tokens: whole sink blocks, plus the last `recent` tokens rounded out to block edges
        (at most recent + b - 1 tokens: the partial block and the full blocks the span reaches into; with
        unit="line", rounded back to the start of a line piece: at most recent + max_line - 1)."""
        edge = self.knobs.max_line if self.knobs.unit == "line" else self.block_size
        return sink_blocks * self.block_size + recent + edge - 1

    def forced_plan(self, budget: int) -> tuple[int, int]:
        """(sink blocks, recent tokens) for this budget: as configured when that fits under the cap; else the
        recency floor shrinks towards the window and the sinks towards one block, largest first."""
        k, b = self.knobs, self.block_size
        sinks = -(-k.sink_tokens // b)
        recent = k.recent_tokens if k.recent_tokens is not None else k.max_window
        cap = math.floor(k.forced_cap * budget)
        if k.forced_cap >= 1 or self._forced_size(sinks, recent) <= cap:
            return sinks, recent
        min_sinks = min(sinks, 1)
        recent = max(k.max_window, min(recent, cap - self._forced_size(sinks, 0)))
        while sinks > min_sinks and self._forced_size(sinks, recent) > cap:
            sinks -= 1
        if self._forced_size(sinks, recent) > cap:
            raise NexusError(self._too_small(budget))
        return sinks, recent

    def _too_small(self, budget: int) -> str:
        k = self.knobs
        floor = self._forced_size(min(-(-k.sink_tokens // self.block_size), 1), k.max_window)
        unit, edge, knob = (("line", "the line piece it falls in", "max_line") if k.unit == "line" else
                            ("block", "the partial block", "block_size"))
        return (f"Budget {budget} tokens is too small for {self.name} with {knob} {getattr(k, knob)}: even its "
                f"smallest forced set (sinks, the last {k.max_window} tokens and {edge}: {floor} tokens) "
                f"would take more than forced_cap={k.forced_cap:g} of it; use a budget of at least "
                f"{math.ceil(floor / k.forced_cap)} tokens, a smaller {knob}, or a larger forced_cap.")

    def min_budget(self) -> int:
        # the smallest forced set this policy can shrink to (the cap itself is checked per budget, check_budget)
        k = self.knobs
        sinks = -(-k.sink_tokens // self.block_size)
        recent = k.recent_tokens if k.recent_tokens is not None else k.max_window
        if k.forced_cap < 1:
            sinks, recent = min(sinks, 1), k.max_window
        return self._forced_size(sinks, recent) + self.block_size  # plus one scored block

    def check_budget(self, budget: int) -> None:
        self.forced_plan(budget)

    def forced_blocks(self, stored: int, budget: int) -> torch.Tensor:
        b = self.block_size
        sinks, recent = self.forced_plan(budget)
        nb = -(-stored // b)
        forced = torch.zeros(nb, dtype=torch.bool)
        forced[:sinks] = True
        forced[max(0, stored - recent) // b :] = True  # every block holding one of the last `recent` tokens
        return forced

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        token_block = torch.arange(stored) // self.block_size
        return self.forced_blocks(stored, budget)[token_block].nonzero().flatten()

    # --- selection ------------------------------------------------------------------------------------------------
    def select(self, view: LayerView) -> torch.Tensor:
        if self.knobs.unit == "line":
            return self._select_lines(view)
        return self._select_blocks([view])[0]

    def select_event(self, views: list[LayerView]) -> list[torch.Tensor]:
        if not self.knobs.joint_layers or not views:
            return super().select_event(views)
        first = views[0]
        for v in views[1:]:
            if v.stored != first.stored or v.budget != first.budget or not torch.equal(v.positions, first.positions):
                raise NexusError(f"joint_layers=true keeps one token set for every evicting layer, so they must hold "
                                 f"the same tokens under the same budget; layer {v.layer_idx} holds {v.stored} "
                                 f"tokens (budget {v.budget}) and layer {first.layer_idx} {first.stored} (budget "
                                 f"{first.budget}): run it with uniform budgets and nothing evicted per layer.")
        return self._select_blocks(views)

    def _select_blocks(self, views: list[LayerView]) -> list[torch.Tensor]:
        """One keep set for every view: one layer, or (joint_layers) every evicting layer of the event, which then
        hold the same tokens: their weights are averaged, so one draw decides for all of them."""
        view = views[0]
        b, stored = self.block_size, view.stored
        forced = self.forced_blocks(stored, view.budget)
        if self.knobs.surprise_share:  # b = 1: blocks are tokens; the slice is kept like the forced set
            room = view.budget - int(forced.sum())
            forced[surprising_lines(view.state, forced, self.knobs.max_line,
                                    int(self.knobs.surprise_share * room))] = True
        sizes = torch.full((forced.numel(),), b)
        if stored % b:
            sizes[-1] = stored % b
        k = (view.budget - int(sizes[forced].sum())) // b
        candidates = (~forced).nonzero().flatten()
        if k >= candidates.numel():
            return [torch.arange(stored)] * len(views)
        keep_blocks = forced.clone()
        if k > 0:
            on = candidates.to(view.keys.device)
            weights = torch.stack([self.weights(v)[on].float() for v in views]).mean(dim=0)
            shared = self.knobs.shared_draws or self.knobs.joint_layers
            if self.knobs.design == "systematic":
                chosen, pi = self.choose_systematic(weights.cpu(), k, view.rng_seed(shared))
                if self.knobs.hajek:
                    for v in views:
                        self._add_hajek_bias(v, candidates[chosen], pi)
            else:
                ids, seed = self.draw_ids(view, candidates * b)
                chosen = self.choose(weights, k, seed, ids).cpu()
            keep_blocks[candidates[chosen]] = True
        token_block = torch.arange(stored) // b
        return [keep_blocks[token_block].nonzero().flatten()] * len(views)

    def choose_systematic(self, weights: torch.Tensor, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k candidate indices and their inclusion probabilities: the top slice (pi = 1), then a systematic PPS
        sample of the rest in stream order with pi proportional to weight ** temper + floor * mean."""
        top = int(round(self.knobs.top_share * k))
        order, pool = top_and_rest(weights, top)
        w = weights[pool].double().clamp_min(0) ** self.knobs.temper
        s = w + self.knobs.floor * float(w.mean().clamp_min(1e-30))
        pi = inclusion_probs(s, float(k - top))
        picked = systematic_sample(pi, torch.Generator().manual_seed(seed))[: k - top]  # never over the budget
        return torch.cat([order, pool[picked]]), torch.cat([torch.ones(top, dtype=pi.dtype), pi[picked]])

    def _add_hajek_bias(self, view: LayerView, blocks: torch.Tensor, pi: torch.Tensor) -> None:
        """Every token of a kept block with pi < 1 gets log(1/pi) more logit bias; the cache gathers the bias with
        the keys it keeps, so a token's total is log of 1 / (the product of its per-event probabilities)."""
        b, stored = self.block_size, view.stored
        bias = view.logit_bias  # aligned with the stored tokens by the cache before every event
        bias = torch.zeros(stored) if bias is None else bias.float().cpu().clone()
        add = torch.zeros(-(-stored // b), dtype=torch.float64)
        add[blocks] = torch.log(1.0 / pi.clamp_min(1e-30))
        bias += add[torch.arange(stored) // b].float()
        view.state[LOGIT_BIAS] = bias.to(view.keys.device)

    def _select_lines(self, view: LayerView) -> torch.Tensor:
        """unit="line": the same scores and walk, over source lines instead of fixed blocks. The forced tokens are
        exactly the configured sinks and recency floor (their own units); every other line is sampled by its
        attention per token, since a line costs its length, and taken whole in key order while it fits."""
        stored, b = view.stored, self.block_size
        sinks, recent = self.forced_plan(view.budget)
        sink = torch.zeros(stored, dtype=torch.bool)
        sink[: sinks * b] = True
        line = view.state.get(LINE_STATE)
        if line is None or line.shape[-1] != stored:  # fed without ids (e.g. under nexus.bounded): max_line chunks
            line = torch.full((stored,), -1, dtype=torch.long)
        unit, sizes, unit_forced = line_units(line.cpu(), sink, self.knobs.max_line)
        # the recency floor is rounded back to the start of the line piece it falls in (at most max_line - 1 more
        # tokens, in the forced-set bound): cutting there would leave the line's head to be dropped on its own
        unit_forced[unit[max(0, stored - recent):]] = True
        room = view.budget - int(sizes[unit_forced].sum())
        candidates = (~unit_forced).nonzero().flatten()
        if int(sizes[candidates].sum()) <= room:
            return torch.arange(stored)
        keep_units = unit_forced.clone()
        if room > 0:
            k = self.knobs
            queries = view.queries[:, -(k.prefill_window or k.window if view.phase == "prefill" else k.window):] \
                if view.queries is not None else None
            tokens, _ = kernels.window_block_scores(queries, view.keys, 1)  # [W, stored] per-token distribution
            dist = tokens.new_zeros(tokens.shape[0], sizes.numel()).index_add_(1, unit.to(tokens.device), tokens)
            hub = view.phase == "prefill" and k.prefill_score == "hub"
            weights = block_weights(dist, k.walk_steps, k.lam, k.eps, k.walk_rows, hub=hub).cpu()
            density = (weights / sizes)[candidates].float()
            cand_sizes = sizes[candidates]
            top = torch.zeros(0, dtype=torch.long)
            if k.top_share and k.n != "det":  # a deterministic top slice by the weights themselves, by tokens
                top = fill_in_order(torch.sort(density, descending=True, stable=True).indices, cand_sizes,
                                    int(round(k.top_share * room)))
                room -= int(cand_sizes[top].sum())
            if k.temper != 1:
                density = density.clamp_min(0) ** k.temper
            if k.n == "det":
                order = torch.sort(density, descending=True, stable=True).indices
            else:
                first = candidates  # unused by fresh draws
                if k.key_span:  # a line piece is kept or dropped whole, so its first token (its key) lasts as long
                    starts = torch.ones(stored, dtype=torch.bool)
                    starts[1:] = unit[1:] != unit[:-1]  # units are contiguous runs numbered in order
                    first = starts.nonzero().flatten()[candidates]
                ids, seed = self.draw_ids(view, first)
                keys = kernels.reservoir_log_priorities(density, k.n, seed, ids=None if ids is None else ids.cpu())
                order = torch.sort(keys, descending=True, stable=True).indices
                order = order[~torch.isin(order, top)]
            keep_units[candidates[torch.cat([top, fill_in_order(order, cand_sizes, room)])]] = True
        return keep_units[unit].nonzero().flatten()

    def draw_ids(self, view: LayerView, first: torch.Tensor) -> tuple[torch.Tensor | None, int]:
        """Which uniforms each candidate unit (block or line piece) draws; `first` is the stored index of each one's
        first token. Fresh (key_span 0): by its index, from a seed new at every event, so surviving E events is a
        product of E independent lotteries and a unit nothing attends to decays geometrically. Persistent: by (first
        position // key_span), from one seed per layer, so a unit keeps its key for its lifetime, as in reservoir
        sampling over a stream, and survival no longer compounds per event. shared_draws: one seed for all layers."""
        span, shared = self.knobs.key_span, self.knobs.shared_draws or self.knobs.joint_layers
        if span == 0:
            return None, view.rng_seed(shared)
        positions = view.positions if view.positions.dim() == 1 else view.positions[0]
        first_pos = positions[first.to(positions.device)].to(torch.int64)
        return (first_pos // span).to(view.keys.device), view.layer_seed(shared)

    def choose(self, weights: torch.Tensor, k: int, seed: int, ids: torch.Tensor | None = None) -> torch.Tensor:
        """k candidate indices: a deterministic top slice (top_share of k), the rest by the reservoir."""
        top = int(round(self.knobs.top_share * k)) if self.knobs.n != "det" else k
        if top == k:  # nothing left to sample: no need for the rest's mask
            return torch.topk(weights, k).indices
        order, pool = top_and_rest(weights, top)
        tail = weights[pool] if self.knobs.temper == 1 else weights[pool].clamp_min(0) ** self.knobs.temper
        sampled = pool[kernels.reservoir_topk(tail, k - top, self.knobs.n, seed=seed,
                                              ids=None if ids is None else ids[pool])]
        return torch.cat([order, sampled])

    def weights(self, view: LayerView) -> torch.Tensor:
        k = self.knobs
        prefill = view.phase == "prefill"
        rows = (k.prefill_window or k.window) if prefill else k.window
        queries = view.queries[:, -rows:] if view.queries is not None else None
        dist = self.block_dist(queries, view)
        weights = block_weights(dist, k.walk_steps, k.lam, k.eps, k.walk_rows, hub=prefill and k.prefill_score == "hub")
        if k.anchor_tokens and view.anchor_queries is not None:  # the task's queries sit after every stored key
            weights = weights + self.block_dist(view.anchor_queries, view, causal=False).mean(dim=0)
        return self._carried(view, weights) if k.carry > 0 else weights

    def block_dist(self, queries: torch.Tensor, view: LayerView, causal: bool = True) -> torch.Tensor:
        """[rows, blocks]: each query row's attention summed per block. causal: the rows are the last stored tokens;
        else every row sees every key. With a logit bias it scores the attention the model computes, correction
        included (the reference scorer: the window kernel takes no bias)."""
        if view.logit_bias is not None:
            return biased_block_dist(queries, view, self.block_size, causal)
        dist, _ = kernels.window_block_scores(queries, view.keys, self.block_size,
                                              causal_offset=None if causal else view.stored)
        return dist

    def _carried(self, view: LayerView, weights: torch.Tensor) -> torch.Tensor:
        """Blend this event's weights with what earlier events gave the same tokens. Kept per token in the layer's
        token_state, which the cache compacts with every keep; tokens appended since the last event start at 0."""
        b, stored = self.block_size, view.stored
        token_block = torch.arange(stored, device=weights.device) // b
        fresh = weights[token_block] / b
        prev = view.state.get(CARRY_STATE)
        prev = torch.zeros(0, device=weights.device) if prev is None else prev.to(weights.device, weights.dtype)
        prev = torch.nn.functional.pad(prev, (0, stored - prev.shape[0]))
        mixed = self.knobs.carry * prev + (1 - self.knobs.carry) * fresh
        view.state[CARRY_STATE] = mixed
        return torch.zeros_like(weights).index_add_(0, token_block, mixed)

    def describe(self) -> dict:
        knobs = {f.name: getattr(self.knobs, f.name) for f in fields(NexusKnobs)}
        return {**super().describe(), **knobs}


class NexusPaperPolicy(NexusPolicy):
    name = "nexus_paper"
    preset = PAPER


class NexusDraftPolicy(NexusPolicy):
    name = "nexus_draft"
    preset = DRAFT


class NexusReservoirPolicy(NexusPolicy):
    name = "nexus_reservoir"
    preset = RESERVOIR


PRESETS = {cls.name: cls.preset for cls in (NexusPolicy, NexusPaperPolicy, NexusDraftPolicy, NexusReservoirPolicy)}
