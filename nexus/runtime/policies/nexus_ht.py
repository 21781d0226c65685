"""`nexus_ht`: certified eviction by randomized design ("Error Certificates for KV-Cache Eviction via Randomized
Design", arXiv 2607.21475; beyond the Nexus paper).

Per layer and eviction event (one kept set per layer, shared by the heads):
1. score s_i = attention the last W queries give token i (head mean, summed over the window, including the logit
   bias already applied, so a token that stands in for evicted peers scores for them), plus `floor` times the mean
   score: every token gets a positive inclusion probability, and the defensive floor bounds the 1/pi weights.
2. keep sinks + recent window + the top `top_fraction` of the scored budget deterministically (pi = 1).
3. Poisson-sample the tail: token i is kept independently with pi_i = min(1, c * s_i), c set so that sum pi equals
   the tail budget minus `margin_sd` standard deviations (so the hard cap, which then drops the kept tokens with the
   largest u_i / pi_i, rarely binds; how often it did is in the certificate as `cap_hits`).
4. every kept tail token gets log(1 / pi_i) added to its attention logit (accumulated over events: its inclusion
   probability is the product of the per-event ones). Inside the softmax this weighs it by 1 / pi_i: the attention
   output becomes the Hajek (ratio) estimator of the dense output.
5. certificate: at every forward, for the newest query, the linearized variance of that Hajek estimator under
   Poisson sampling, V_d = sum_{i kept} (1 - pi_i) * p_i^2 * (v_id - o_d)^2 (p = corrected attention, o = output),
   per head; `stream.stats.certificate` reports its relative standard error, max and mean over layers and heads.
"""

from __future__ import annotations

import math

import torch

from nexus.errors import NexusError
from nexus.runtime.cache import LOGIT_BIAS
from nexus.runtime.policies.base import EvictionPolicy, LayerView, StreamHook, sink_and_recent
from nexus.runtime.policies.inclusion import inclusion_probs
from nexus.runtime.policies.scoring import window_scores

Z95 = 1.959964


def tail_terms(values: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What the certificate needs of the sampled tail (bias = log(1/pi) > 0; tokens kept for sure have pi = 1 and
    add no variance): (indices, 1 - pi, v, v^2). Constant between eviction events, so the hook caches it."""
    tail = (bias > 0).nonzero().flatten()
    vt = values.float()[:, tail]
    return tail, 1.0 - torch.exp(-bias[tail].float()), vt, vt * vt


def hajek_output(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor | None,
                 terms: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output of one query per head and its certificate variance.

    query [Hq, D], keys/values [Hkv, S, D], bias [S] = log(1/pi) (0 for tokens kept for sure) or None.
    Returns (output [Hq, D], variance [Hq, D]) where variance is the linearized Poisson-sampling variance of the
    Hajek estimator, estimated from the kept set: V_d = sum_i (1 - pi_i) p_i^2 (v_id - o_d)^2."""
    hq, d = query.shape
    hkv, length, _ = keys.shape
    group = hq // hkv
    q = query.float().reshape(hkv, group, d)  # GQA: each KV head's query group, no repeat of K/V
    logits = torch.einsum("hgd,hsd->hgs", q, keys.float()) / math.sqrt(d)
    bias = torch.zeros(length, device=keys.device) if bias is None else bias.float().to(keys.device)
    probs = torch.softmax(logits + bias, dim=-1)  # the corrected attention p_i
    out = torch.einsum("hgs,hsd->hgd", probs, values.float())
    tail, one_minus_pi, vt, vt2 = terms if terms is not None else tail_terms(values, bias)
    w = one_minus_pi[None, None, :] * probs[..., tail] ** 2
    # the square expanded, so no [H, S, D] residual is built
    var = (torch.einsum("hgs,hsd->hgd", w, vt2) - 2 * out * torch.einsum("hgs,hsd->hgd", w, vt)
           + out**2 * w.sum(-1, keepdim=True))
    return out.reshape(hq, -1), var.clamp_min(0.0).reshape(hq, -1)


class CertificateHook(StreamHook):
    """Certifies every forward: the newest query of each layer with a bias, per head."""

    def __init__(self, cache, policy: "NexusHTPolicy"):
        self.cache = cache
        self.policy = policy
        self.rse: dict[int, float] = {}  # layer -> max over heads of relative standard error
        self.se: dict[int, float] = {}  # layer -> max over heads of the output's standard error (L2 over dims)
        self._terms: dict[int, tuple] = {}  # layer -> (bias it was built from, tail_terms)

    def observe(self, layer_idx: int, query: torch.Tensor, keys: torch.Tensor) -> None:
        layer = self.cache.layers[layer_idx]
        bias = layer.token_state.get(LOGIT_BIAS)
        if bias is None:
            return
        cached = self._terms.get(layer_idx)
        if cached is None or cached[0] is not bias:  # a new bias tensor = a new eviction event
            cached = (bias, tail_terms(layer.values[0][:, : bias.shape[-1]], bias))
            self._terms[layer_idx] = cached
        # tokens appended since the event carry bias 0 (kept for sure)
        full = torch.nn.functional.pad(bias, (0, keys.shape[1] - bias.shape[-1]))
        out, var = hajek_output(query[:, -1], keys, layer.values[0], full, cached[1])
        se = var.sum(dim=-1).sqrt()
        self.se[layer_idx] = float(se.max())
        self.rse[layer_idx] = float((se / out.norm(dim=-1).clamp_min(1e-12)).max())

    def certificate(self) -> dict | None:
        if not self.rse:
            return None
        rse = list(self.rse.values())
        return {
            "method": "hajek-poisson",
            "z": Z95,
            "layers": len(rse),
            "rse_max": max(rse),  # relative standard error of the attention output, worst layer/head
            "rse_mean": sum(rse) / len(rse),
            "se_max": max(self.se.values()),
            "ci95_rel_halfwidth_max": Z95 * max(rse),
            "layer_events": self.policy.events,
            "cap_hits": self.policy.cap_hits,
            "tail_sampled": self.policy.tail_sampled,
        }


class NexusHTPolicy(EvictionPolicy):
    name = "nexus_ht"
    requires_logit_bias = True
    aliases = {**EvictionPolicy.aliases, "W": "window"}

    def __init__(self, window: int = 16, sinks: int = 4, recent: int = 32, top_fraction: float = 0.25,
                 margin_sd: float = 2.0, floor: float = 0.1, hajek: bool = True, **kwargs):
        super().__init__(**kwargs)
        if window < 1:
            raise NexusError(f"window (W) must be >= 1, got {window}.")
        if sinks < 0 or recent < window:
            raise NexusError(f"nexus_ht needs sinks >= 0 and recent >= window ({window}), got sinks={sinks}, "
                             f"recent={recent}: the window's own tokens must stay in the cache.")
        if not 0 <= top_fraction < 1:
            raise NexusError(f"top_fraction must be in [0, 1), got {top_fraction}.")
        if margin_sd < 0 or floor <= 0:
            raise NexusError(f"margin_sd must be >= 0 and floor > 0, got margin_sd={margin_sd}, floor={floor}.")
        self.window = window
        self.sinks = sinks
        self.recent = recent
        self.top_fraction = top_fraction
        self.margin_sd = margin_sd
        self.floor = floor
        # False: the same kept set without the log(1/pi) bias (and so without a certificate); an ablation knob, to
        # measure on a real model how much of nexus_ht's quality the correction carries
        self.hajek = hajek
        # counters of this policy instance (one instance per stream, as make_policy builds them)
        self.events = 0
        self.cap_hits = 0
        self.tail_sampled = 0

    def min_budget(self) -> int:
        return self.sinks + self.recent + 1

    def forced_tokens(self, stored: int, budget: int) -> torch.Tensor:
        return sink_and_recent(stored, self.sinks, self.recent)

    def make_hook(self, cache) -> StreamHook:
        return CertificateHook(cache, self)

    def scores(self, view: LayerView) -> torch.Tensor:
        """[S] window attention (with the current bias), head mean, with a positive floor."""
        s = window_scores(view.queries, view.keys, view.positions, view.logit_bias).float().mean(dim=0).cpu()
        return s + self.floor * float(s.mean().clamp_min(1e-12))

    def select(self, view: LayerView) -> torch.Tensor:
        stored, budget = view.stored, view.budget
        if view.positions.dim() != 1 or (view.logit_bias is not None and view.logit_bias.dim() != 1):
            raise RuntimeError("nexus_ht keeps one token set per layer; per-head layouts are not supported")
        forced = self.forced_tokens(stored, budget)
        is_candidate = torch.ones(stored, dtype=torch.bool)
        is_candidate[forced] = False
        candidates = is_candidate.nonzero().flatten()
        k = budget - forced.numel()
        scores = self.scores(view)[candidates]
        top_k = int(self.top_fraction * k)
        by_score = torch.sort(scores, descending=True, stable=True).indices
        top, tail = by_score[:top_k], by_score[top_k:]
        m = k - top_k
        expected = max(0.0, m - self.margin_sd * math.sqrt(m))
        pi = inclusion_probs(scores[tail], expected)
        gen = torch.Generator().manual_seed(view.rng_seed())
        u = torch.rand(tail.numel(), generator=gen, dtype=torch.float64).float()
        kept = u < pi
        if int(kept.sum()) > m:  # hard cap: the budget is never exceeded
            self.cap_hits += 1
            ratio = torch.where(kept, u / pi.clamp_min(1e-30), torch.full_like(u, float("inf")))
            kept = torch.zeros_like(kept)
            kept[torch.sort(ratio, stable=True).indices[:m]] = True
        self.events += 1
        self.tail_sampled += int(kept.sum())
        tail_kept = candidates[tail[kept]]
        keep = torch.sort(torch.cat([forced, candidates[top], tail_kept])).values
        if not self.hajek:
            return keep
        bias = view.logit_bias
        bias = torch.zeros(stored) if bias is None else bias.float().cpu().clone()
        bias[tail_kept] += torch.log(1.0 / pi[kept])
        view.state[LOGIT_BIAS] = bias.to(view.keys.device)  # gathered with the keys by layer.keep
        return keep

    def describe(self) -> dict:
        return {**super().describe(), "window": self.window, "sinks": self.sinks, "recent": self.recent,
                "top_fraction": self.top_fraction, "margin_sd": self.margin_sd, "floor": self.floor,
                "hajek": self.hajek}
