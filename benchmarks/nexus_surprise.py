"""Keep what surprised the model: does a slice of the budget held by the most surprising lines keep early facts at 20%?

    python benchmarks/nexus_surprise.py ranks   # diagnostic: where fact lines rank by surprisal (dev items)
    python benchmarks/nexus_surprise.py dev     # the candidates on the dev split; writes choice.json
    python benchmarks/nexus_surprise.py test    # only if a candidate won on dev: it on the test split, run once
    python benchmarks/nexus_surprise.py agent   # stage 2: the agent's task anchor beside the slice (dev traces)
    python benchmarks/nexus_surprise.py where   # post hoc: which parts of an agent's session stay stored
    python benchmarks/nexus_surprise.py cost    # post hoc: the slice's time cost, one stream, interleaved
    python benchmarks/nexus_surprise.py report  # surprise.md from the records

WHY. At 20% of a 2.2K stream no policy has kept a planted fact that nothing re-references (docs/results.md, the
long-stream sections). The line-keys study showed what such a fact needs: its whole line, kept by a decision made
once (not a fresh lottery at each of ~28 events) and made alike in every layer. Its uniform reservoir did that and
kept about room/seen of the facts, at 5.5x random's fidelity KL; attention could not be that decision, since it
re-ranks every event and does not single the fact lines out (they sit near the haystack's median). A question-
agnostic score that prefers fact lines must see them stand out when they arrive. The model's surprise does: a name
or value it could not predict is information the context cannot give back (nexus/runtime/surprisal.py). It is fixed
at feed time and is a property of the token, so a top slice by it is one persistent decision, the same in every
layer. `surprise_share=s` keeps s of the scored room (the budget less sinks and the 64-token floor) as the stored
line pieces with the most summed surprisal, then samples the rest as `nexus` does.

LOOKED AT BEFORE THE CELLS (the `ranks` stage, dev items only, no policy run): summed dense surprisal per line piece
(max_line 32) ranks the four fact lines of each dev item within the top ~8% of ~200 lines; a static slice of 110
tokens filled by that score would hold 16 of the 32 fact lines of 8 dev items whole (by mean surprisal: 11). That is
why the score is the sum, and why the shares below.

CELLS (dev split, the Nexus study's items, sizes, chunk 64 and seed; traces over the five dev sessions):
    nexus surprise25    today's nexus with surprise_share 0.25 (about 94 of the 442 tokens at 20% of 2.2K)
    nexus surprise50    today's nexus with surprise_share 0.5
against today's `nexus` (the window stage's "nexus recent64" cells, relabelled), random and snapkv, copied from
benchmarks/results/nexus_window (same items by hash, same code path: surprise_share 0 computes nothing new).

OBJECTIVE (declared here before any of these cells ran; the rule of the joint and window stages): J as in the Nexus
study (mean over fidelity, longstream and traces of the improvement over random at 20%, relative to random's
distance from dense), traces over the five dev sessions. The choice is the highest J among `nexus` and the two
candidates. A chosen candidate runs once on the test split: fidelity at 10/20/50% (the study's 4 items), traces
over the five test sessions at 20%, and long-stream at 20% and 50% on the 12 items of benchmarks/nexus_power.py
(random, snapkv and `nexus` copied from there). It becomes the default only if on test it still beats random
beyond noise (paired) on fidelity and traces at 20%; the issue's long-stream line is met only if it also beats
random there beyond noise over the 12 items. Reported as they come out either way. Reported beside J on dev, no
choice depending on them: gap per fact and facts kept whole at 20% and 50%, survival per kind, fidelity and traces
KL against `nexus`, and the seconds per long-stream cell (the slice needs logits at every fed position).

STAGE 2, AGENT (declared here before its cells ran, after the test run): the agent anchors its task message on a
`nexus` stream by default (benchmarks/nexus_agent_anchor.py). Whether the anchor still helps beside the slice was
not measured. CELL on the five dev sessions at 20%: `nexus surprise50 task` (surprise_share 0.5, anchor_start 257,
anchor_tokens 51, the scripted sessions' task span). GUARD RULE: if `nexus surprise50 task` - `nexus surprise50`
(paired over the five dev sessions, next-action KL) is above 0 beyond noise, the agent stops anchoring when the slice
is on; otherwise it anchors as before. Reported beside: against the agent's stream before (`nexus task`, copied from
benchmarks/results/nexus_agent_anchor's dev records).
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nexus_joint  # noqa: E402
from nexus_lines import fmt, mean  # noqa: E402
from nexus_power import ITEMS as POWER_ITEMS  # noqa: E402
from nexus_study import (CHUNK, SEED, SIZES, STUDY_DENSITY, TEST_DENSITIES, WIDE_SIZES, Study,  # noqa: E402
                         objective, paired)
from nexus_study import fmt as fmt_kl  # noqa: E402

from nexus.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from nexus.evals.kv.longstream import LongStreamSuite  # noqa: E402
from nexus.runtime import InferenceStream, make_policy  # noqa: E402
from nexus.runtime.lines import LINE_STATE, LineCounter, line_break_table  # noqa: E402
from nexus.runtime.model_loading import load_model  # noqa: E402
from nexus.runtime.policies.nexus_lines import line_units, surprising_lines  # noqa: E402
from nexus.runtime.surprisal import SURPRISAL_STATE, token_surprisal  # noqa: E402

CANDIDATES = [("nexus surprise25", "nexus", {"surprise_share": 0.25}),
              ("nexus surprise50", "nexus", {"surprise_share": 0.5})]
PLAIN = {"surprise_share": 0.0}  # `nexus` without the slice, whatever the default (post-hoc stages)
TODAY = "nexus recent64"  # today's default as the window stage recorded it
BASELINES = ("random", "snapkv")
OUT = Path("benchmarks/results/nexus_surprise")
WINDOW = Path("benchmarks/results/nexus_window")
POWER = Path("benchmarks/results/nexus_power")
TEST_SIZES = {**WIDE_SIZES, "longstream": dataclasses.replace(SIZES["longstream"], items=POWER_ITEMS)}
TITLE = "Keep what surprised the model (benchmarks/nexus_surprise.py)"


def _copy(folder: Path, name: str, split: str, suites: tuple[str, ...], labels: dict[str, str]) -> list[dict]:
    return [{**r, "label": labels[r["label"]]} for r in json.loads((folder / name).read_text())
            if r["label"] in labels and r["split"] == split and r["suite"] in suites]


def seed_records(out: Path, split: str) -> None:
    """Start the split's records with today's default and the baselines, measured on the same items by the same code
    (dev: the window stage's cells; test: its fidelity and traces cells and nexus_power's 12 long-stream items).
    Once: kept if the records exist."""
    name = "records.json" if split == "dev" else "records-test.json"
    if (out / name).exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    labels = {**{b: b for b in BASELINES}, TODAY: "nexus"}
    window_items = json.loads((WINDOW / f"items-{split}.json").read_text())
    if split == "dev":
        records = _copy(WINDOW, "records.json", "dev", ("fidelity", "longstream", "traces"), labels)
        items = window_items
    else:
        records = (_copy(WINDOW, "records-test.json", "test", ("fidelity", "traces"), labels)
                   + _copy(POWER, "records-test.json", "test", ("longstream",), {**labels, "nexus": "nexus"}))
        items = {**window_items, "longstream": json.loads((POWER / "items-test.json").read_text())["longstream"]}
    write_json_atomic(out / f"items-{split}.json", items)
    write_json_atomic(out / name, records)


def dev(out: Path) -> dict:
    seed_records(out, "dev")
    return nexus_joint.dev(out, CANDIDATES)


def test(out: Path) -> None:
    cell = nexus_joint.chosen_cell(out)
    seed_records(out, "test")
    study = Study(out, "test", sizes=TEST_SIZES)
    study.run("test", cell, [STUDY_DENSITY], suites=("traces",))
    study.run("test", cell, list(TEST_DENSITIES), suites=("fidelity",))
    study.run("test", cell, [0.2, 0.5], suites=("longstream",), qfirst=False)


@torch.inference_mode()
def ranks(out: Path, items: int = 8) -> dict:
    """Diagnostic (no policy runs): each dev item's haystack in one dense forward; each fact line's rank among the
    stream's line pieces by summed surprisal, and how many fact lines a static slice of 110 tokens holds whole."""
    model, tok = load_model("embedded", device="cpu")
    size = dataclasses.replace(SIZES["longstream"], items=items)
    table, rows = line_break_table(tok), []
    for item in LongStreamSuite().build_items(size, tok, SEED, "dev"):
        ids = item.data["haystack"]
        nats = token_surprisal(None, model(input_ids=torch.tensor([ids])).logits[0, :-1], ids)
        line = LineCounter(table)(ids)
        state = {LINE_STATE: line, SURPRISAL_STATE: nats}
        unit, sizes, _ = line_units(line, torch.zeros(len(ids), dtype=torch.bool), 32)
        score = torch.zeros(sizes.numel(), dtype=torch.float64).index_add_(0, unit, nats.double())
        kept = torch.zeros(len(ids), dtype=torch.bool)
        kept[surprising_lines(state, torch.zeros(len(ids), dtype=torch.bool), 32, 110)] = True
        for p in (p for p in item.data["planted"] if p["fact"]):
            lo, hi = p["span"]
            own = float(score[unit[lo:hi].unique()].max())
            rows.append({"item": item.id, "role": p["role"], "rank": int((score > own).sum()) + 1,
                         "pieces": int(sizes.numel()), "whole_in_110": bool(kept[lo:hi].all()),
                         "mean_nats": float(nats[lo:hi].mean()), "haystack_median_nats": float(nats.median())})
    summary = {"fact_lines": len(rows), "whole_in_110": sum(r["whole_in_110"] for r in rows),
               "median_rank_share": sorted(r["rank"] / r["pieces"] for r in rows)[len(rows) // 2],
               "worst_rank_share": max(r["rank"] / r["pieces"] for r in rows), "rows": rows}
    write_json_atomic(out / "ranks.json", summary)
    return {k: v for k, v in summary.items() if k != "rows"}


ROLES = ("system", "task", "tool output", "assistant")


@torch.inference_mode()
def where(out: Path) -> dict:
    """Post hoc (after the dev outcome; no choice depends on it): on the five dev traces at 20%, at every action
    point past the budget, the share of each part of the session that is still stored (mean over layers), for
    `nexus` and the chosen share: which parts of an agent's stream the slice keeps."""
    model, tok = load_model("embedded", device="cpu")
    suite = Study.traces_suite()
    items = suite.build_items(WIDE_SIZES["traces"], tok, SEED, "dev")
    choice = json.loads((out / "choice.json").read_text())
    cells = {"nexus": PLAIN, choice["label"]: choice["params"]}
    result = {}
    for label, params in cells.items():
        shares = {role: [] for role in ROLES}
        for item in items:
            budget = max(1, math.ceil(STUDY_DENSITY * item.context_tokens))
            stream = InferenceStream(model, tok, make_policy("nexus", **params), budget=budget, chunk_size=CHUNK,
                                     seed=SEED)
            spans = {role: [] for role in ROLES}
            for n, message in enumerate(item.data["messages"]):
                if message["role"] == "assistant" and stream.tokens_seen > budget:
                    for role in ROLES:
                        if spans[role]:
                            want = torch.cat([torch.arange(lo, hi) for lo, hi in spans[role]])
                            shares[role].append(mean(float(torch.isin(want, layer.positions.cpu()).float().mean())
                                                     for layer in stream.cache.layers))
                role = {"system": "system", "assistant": "assistant"}.get(message["role"],
                                                                         "task" if n == 1 else "tool output")
                lo = stream.tokens_seen
                stream.append_message(message["role"], message["content"])
                spans[role].append((lo, stream.tokens_seen))
        result[label] = {role: mean(v) for role, v in shares.items()}
    write_json_atomic(out / "where.json", result)
    return result


AGENT_CELL = ("nexus surprise50 task", "nexus", {"surprise_share": 0.5, "anchor_start": 257, "anchor_tokens": 51})
AGENT_ANCHOR = Path("benchmarks/results/nexus_agent_anchor")


def agent(out: Path) -> dict:
    """Stage 2 (see the docstring): the task anchor beside the slice, five dev sessions, 20%."""
    study = Study(out, "dev", sizes=WIDE_SIZES)
    if not any(r["label"] == "nexus task" for r in study.records):  # the agent's stream before, same sessions
        study.records += _copy(AGENT_ANCHOR, "records.json", "dev", ("traces",), {"nexus task": "nexus task"})
        study.done = {study._key(r) for r in study.records}
    study.run("dev", [AGENT_CELL], [STUDY_DENSITY], suites=("traces",))
    e = paired(study.records, "dev", "traces", AGENT_CELL[0], "nexus surprise50", STUDY_DENSITY)
    before = paired(study.records, "dev", "traces", AGENT_CELL[0], "nexus task", STUDY_DENSITY)
    verdict = {"anchor_vs_slice": [e.mean, e.low, e.high, e.n], "hurts": bool(e.n and e.low > 0),
               "vs_agent_before": [before.mean, before.low, before.high, before.n]}
    write_json_atomic(out / "agent.json", verdict)
    return verdict


@torch.inference_mode()
def cost(out: Path, repeats: int = 3) -> dict:
    """Post hoc: seconds to stream one dev long-stream haystack (2.2K tokens, chunks of 64) at 20%, `nexus` and the
    chosen share interleaved in one process, best of `repeats`: what computing every position's logits costs."""
    model, tok = load_model("embedded", device="cpu")
    item = LongStreamSuite().build_items(SIZES["longstream"], tok, SEED, "dev")[0]
    choice = json.loads((out / "choice.json").read_text())
    cells = {"nexus": PLAIN, choice["label"]: choice["params"]}
    times: dict[str, list[float]] = {label: [] for label in cells}
    budget = math.ceil(STUDY_DENSITY * item.context_tokens)
    for _ in range(repeats):
        for label, params in cells.items():
            stream = InferenceStream(model, tok, make_policy("nexus", **params), budget=budget, chunk_size=CHUNK)
            t0 = time.perf_counter()
            stream.append(item.data["haystack"])
            times[label].append(time.perf_counter() - t0)
    result = {label: {"best_s": min(t), "all_s": t} for label, t in times.items()}
    write_json_atomic(out / "cost.json", result)
    return result


def _interval(e: list) -> str:
    return f"{e[0]:+.3f} [{e[1]:+.3f}, {e[2]:+.3f}] (n={e[3]})"


def report(out: Path) -> str:
    text = nexus_joint.report(out, TITLE, "surprise.md")
    extra = []
    for split in ("dev", "test"):
        path = out / ("records.json" if split == "dev" else "records-test.json")
        if not path.exists():
            continue
        records = json.loads(path.read_text())
        labels = list(dict.fromkeys(r["label"] for r in records))
        extra += [f"## {split}: against random and snapkv, 20% (paired over items)", "",
                  "| policy | fidelity vs random | traces vs random | long-stream vs random | long-stream vs snapkv | "
                  "s per long-stream cell |", "|---|---|---|---|---|---|"]
        for label in labels:
            if label in BASELINES:
                continue
            secs = mean(r["seconds"] for r in records if r["label"] == label and r["suite"] == "longstream"
                        and r["density"] == 0.2 and "metrics" in r)
            extra.append(f"| {label} | {fmt_kl(paired(records, split, 'fidelity', label, 'random', 0.2))} | "
                         f"{fmt_kl(paired(records, split, 'traces', label, 'random', 0.2))} | "
                         f"{fmt(paired(records, split, 'longstream', label, 'random', 0.2))} | "
                         f"{fmt(paired(records, split, 'longstream', label, 'snapkv', 0.2))} | "
                         f"{'n/a' if secs is None else f'{secs:.1f}'} |")
        extra.append("")
        j = {label: objective(records, split, label) for label in labels}
        extra += ["J: " + ", ".join(f"{k} {v:+.3f}" for k, v in j.items() if v is not None), ""]
    if (out / "where.json").exists():
        w = json.loads((out / "where.json").read_text())
        extra += ["## What an agent's stream keeps (dev traces, 20%, post hoc: `where`)", "",
                  "Share of each part of the session still stored at the action points past the budget, mean over "
                  "layers and points.", "", "| policy | " + " | ".join(ROLES) + " |", "|---|" + "---|" * len(ROLES)]
        for label, shares in w.items():
            extra.append(f"| {label} | " + " | ".join("n/a" if shares[r] is None else f"{shares[r]:.0%}"
                                                      for r in ROLES) + " |")
        extra.append("")
    if (out / "agent.json").exists():
        a = json.loads((out / "agent.json").read_text())
        extra += [f"Stage 2 (dev traces, 20%): nexus surprise50 task - nexus surprise50 "
                  f"{_interval(a['anchor_vs_slice'])}"
                  f" (hurts beyond noise: {a['hurts']}); against the agent's stream before (nexus task) "
                  f"{_interval(a['vs_agent_before'])}.", ""]
    if (out / "cost.json").exists():
        c = json.loads((out / "cost.json").read_text())
        extra += ["Streaming one 2.2K-token dev haystack at 20% (CPU, best of 3, interleaved, post hoc `cost`): "
                  + ", ".join(f"{label} {v['best_s']:.1f} s" for label, v in c.items()) + ".", ""]
    if (out / "ranks.json").exists():
        r = json.loads((out / "ranks.json").read_text())
        extra += ["## Where fact lines rank by summed surprisal (dev, `ranks`, dense, no eviction)", "",
                  f"{r['fact_lines']} fact lines: median rank in the top {r['median_rank_share']:.0%} of the "
                  f"stream's line pieces, worst {r['worst_rank_share']:.0%}; a static 110-token slice holds "
                  f"{r['whole_in_110']} whole.", ""]
    text = text + "\n" + "\n".join(extra)
    write_text_atomic(out / "surprise.md", text)
    return text


def main() -> None:
    nexus_joint.stage_cli(__doc__, OUT, {"ranks": ranks, "dev": dev, "test": test, "agent": agent,
                                            "where": where, "cost": cost}, report)


if __name__ == "__main__":
    main()
