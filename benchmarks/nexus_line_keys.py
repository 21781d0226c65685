"""Whole lines with persistent keys: is that what Nexus Sampling needs to keep an early fact at a 20% budget?

    python benchmarks/nexus_line_keys.py dev     # the candidates on the dev split; writes verdict.json
    python benchmarks/nexus_line_keys.py test    # only if the dev verdict holds: the winner on the test split
    python benchmarks/nexus_line_keys.py shared-dev   # stage 2 (below) on the dev split; writes verdict-shared.json
    python benchmarks/nexus_line_keys.py shared-test  # only if the stage-2 dev verdict holds
    python benchmarks/nexus_line_keys.py post-hoc     # two attribution cells on dev (after stage 2; no choice)
    python benchmarks/nexus_line_keys.py frontier     # stage 3: the reservoir's share of the room, dev, 20%
    python benchmarks/nexus_line_keys.py report  # line_keys.md from the records

WHY. Two measured halves of one account (docs/results.md): a planted fact is answered only when its whole line
survives (`unit="line"` keeps lines whole and gains 2.4 nats at 50%, nothing at 20%), and with fresh reservoir draws
a line that nothing attends to survives E events with prod_e q_e, ~0.865^28 at 20% (persistent `key_span` keys stop
the compounding and raise token survival 5-10x, but scattered tokens answer nothing). Each fix alone leaves the 20%
answer gap at -18.4 nats. Together, a persistent key per line piece makes the scored part of the cache a weighted
reservoir sample of whole lines over the whole stream: an early line then survives with roughly (its share of the
weights) x budget / seen, not a compounded lottery. The persistence study's first look found that attention weights
vary by orders of magnitude between events, so the ES key u^(1/w) is ranked by this event's w and a persistent u
only matters where the sampled weights are flat: hence `temper` (sample by w^temper; 0 = a uniform line reservoir,
the ceiling of what question-agnostic persistence can keep).

OBJECTIVE (declared before the grid below ran; nothing was run with these knobs before this was written). The
question is the 20% budget. Candidates, all unit line, max_line 32, key_span 1 (one persistent key per line piece):
    line32 keyed        temper 1    (sample by attention, as today)
    line32 keyed t0.5   temper 0.5
    line32 keyed t0     temper 0    (uniform persistent line reservoir)
against `nexus line32` (whole lines, fresh draws) and `nexus` (b8 blocks, fresh draws), reused from
benchmarks/nexus_lines.py (same items, same code path for their knobs). Metric: the long-stream answer log-likelihood
gap to dense at 20% on the dev split, paired over planted facts (4 items x 3 kinds = 12 facts), and facts kept whole.
VERDICT: the hypothesis holds on dev if the candidate with the highest mean 20% gap beats `nexus line32` beyond noise
(paired 95% interval over facts above 0). Only then is that candidate run once on the test split at 20% (long-stream
and fidelity) beside `nexus line32` and `nexus`, and reported as it comes out. 50% and fidelity KL at 20% are
measured on dev for every candidate to show the cost. The default does not change here: the line-study rule (mean
gap over 20/50% with the fidelity guard against `nexus`) already ruled out line units (+0.11 nats/token KL), and a
candidate would have to pass that guard to become the default.

STAGE 1 OUTCOME (dev, 2026-12-06): the verdict did not hold (best t0, +0.66 [-0.20, +1.63] nats over 12 facts), so
no test run. Reading the records: `survival` is the mean over the model's 30 layers, and every layer draws its own
uniforms (the seed mixes in the layer index). At t0 a fact line is stored in ~16% of layers at the end, a different
~16% for each fact, so no fact is stored in all layers (0/12 whole) and the layers that copy an answer rarely hold it.

STAGE 2 (declared after reading stage 1, before its grid ran). Hypothesis: the layers must agree on what to keep.
`shared_draws` gives every layer the same uniforms (with temper 0 the same lines exactly; with attention weights,
correlated choices). Candidates, all line32 with key_span 1 and shared_draws:
    line32 keyed t0 shared     temper 0 (a uniform line reservoir, the same in every layer)
    line32 keyed shared        temper 1
    line32 half t0 shared      top_share 0.5, temper 0: half the scored room is the top lines by attention (for
                               fidelity), the rest the shared uniform line reservoir (for facts): a split budget
Same metric and rule as stage 1: the verdict holds if the candidate with the highest mean 20% gap on dev beats
`nexus line32` beyond noise (paired over the 12 facts); only then is it run once on the test split at 20%
(long-stream, fidelity) beside `nexus line32` and `nexus`, reported as it comes out. "line32 keyed t0 shared" minus
"line32 keyed t0" (paired) reads the effect of shared draws alone. The default rule is unchanged (see above).

STAGE 2 OUTCOME: the verdict held on dev (line32 keyed t0 shared +6.15 [+2.04, +10.28]) and on the test split, run
once (+6.25 [+1.79, +11.03], fidelity KL 0.698 vs nexus 0.078). POST_HOC (below) then split the three parts apart on
dev; no choice depends on those cells. docs/results.md ("Whole lines with persistent keys") has the reading.

STAGE 3 (declared before its grid ran): the trade-off curve, no choice and no test run. How do the fact gap and
fidelity KL at 20% move as the shared uniform line reservoir's share of the scored room goes 100% (top_share 0,
stage 2) -> 50% (stage 2's split) -> 25% -> 10% (FRONTIER, the rest the top lines by attention)? Dev only, 20% only.
Outcome: KL 0.750 / 0.367 / 0.295 / 0.247 and gap vs line32 +6.15 / +1.66 / +1.25 / +1.32 (1 of 12 facts whole at
every share below 100%); at 10% the KL is within noise of nexus on dev. Not run on test, as declared.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus_lines import copy_records, fmt, mean, whole_facts  # noqa: E402
from nexus_study import Study, paired, per_item  # noqa: E402

from nexus.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from nexus.evals.kv.metrics import bootstrap_mean  # noqa: E402

LINE32 = {"unit": "line", "max_line": 32}
REUSED = [("nexus", "nexus_reservoir", {}), ("nexus line32", "nexus_reservoir", LINE32)]
CANDIDATES = [("line32 keyed", "nexus_reservoir", {**LINE32, "key_span": 1}),
              ("line32 keyed t0.5", "nexus_reservoir", {**LINE32, "key_span": 1, "temper": 0.5}),
              ("line32 keyed t0", "nexus_reservoir", {**LINE32, "key_span": 1, "temper": 0.0})]
SHARED = [("line32 keyed t0 shared", "nexus_reservoir", {**LINE32, "key_span": 1, "temper": 0.0, "shared_draws": True}),
          ("line32 keyed shared", "nexus_reservoir", {**LINE32, "key_span": 1, "shared_draws": True}),
          ("line32 half t0 shared", "nexus_reservoir", {**LINE32, "key_span": 1, "top_share": 0.5, "temper": 0.0,
                                              "shared_draws": True})]
# Run after stage 2's verdict, to tell which of its three parts carry the effect; no choice depends on them.
POST_HOC = [("line32 t0 shared fresh (post hoc)", "nexus_reservoir", {**LINE32, "temper": 0.0, "shared_draws": True}),
            ("b8 span8 t0 shared (post hoc)", "nexus_reservoir", {"key_span": 8, "temper": 0.0, "shared_draws": True})]
FRONTIER = [(f"line32 {share:.0%} t0 shared", "nexus_reservoir", {**LINE32, "key_span": 1, "top_share": 1 - share,
                                                        "temper": 0.0, "shared_draws": True}) for share in (0.25, 0.1)]
BASELINES = ("random", "snapkv")
KINDS = ("single", "twohop", "reref")
DENSITIES = (0.2, 0.5)
OUT = Path("benchmarks/results/nexus_line_keys")
LINES = Path("benchmarks/results/nexus_lines")
STUDY = Path("benchmarks/results/nexus_study")


def seed_records(out: Path, split: str) -> None:
    """Reuse cells measured on the same items by the same code path: nexus and nexus line32 on dev (the line study),
    random and snapkv on test (the Nexus study)."""
    copy_records(out, split, *((LINES, {c[0] for c in REUSED}) if split == "dev" else (STUDY, set(BASELINES))))


def per_fact(records, split, label, density) -> dict[tuple[str, str], float]:
    """Answer gap per planted fact: (item, kind) -> nats."""
    return {(r["item"], k): r["metrics"][f"logprob_gap_{k}"] for r in records
            if r["split"] == split and r["suite"] == "longstream" and r["label"] == label
            and r["density"] == density and "metrics" in r for k in KINDS}


def paired_facts(records, split, label, other, density):
    a, b = per_fact(records, split, label, density), per_fact(records, split, other, density)
    return bootstrap_mean([a[f] - b[f] for f in sorted(set(a) & set(b))])


def dev(study: Study, candidates=CANDIDATES, name: str = "verdict.json") -> dict:
    study.run("dev", candidates, DENSITIES, suites=("longstream",))
    study.run("dev", candidates, [0.2], suites=("fidelity",))
    gaps = {c[0]: mean(per_fact(study.records, "dev", c[0], 0.2).values()) for c in REUSED + candidates}
    best = max(candidates, key=lambda c: gaps[c[0]])
    e = paired_facts(study.records, "dev", best[0], "nexus line32", 0.2)
    verdict = {"best": best[0], "policy": best[1], "params": best[2], "gap_20": gaps,
               "best_vs_line32": [e.mean, e.low, e.high, e.n], "holds": bool(e.n and e.low > 0)}
    write_json_atomic(study.out / name, verdict)
    return verdict


def test(study: Study, name: str = "verdict.json") -> None:
    verdict = json.loads((study.out / name).read_text())
    if not verdict["holds"]:
        raise SystemExit("The dev verdict did not hold (verdict.json), so by the declared rule there is no test run.")
    cells = REUSED + [(verdict["best"], verdict["policy"], verdict["params"])]
    study.run("test", cells, [0.2], suites=("longstream",), qfirst=False)
    study.run("test", cells, [0.2], suites=("fidelity",))


def report(out: Path) -> str:
    records = [r for name in ("records.json", "records-test.json") if (out / name).exists()
               for r in json.loads((out / name).read_text())]
    lines = ["# Whole lines with persistent keys (benchmarks/nexus_line_keys.py)", ""]
    known = list(BASELINES) + [c[0] for c in REUSED + CANDIDATES + SHARED + POST_HOC + FRONTIER]
    for split in ("dev", "test"):
        labels = [lab for lab in known if any(r["label"] == lab and r["split"] == split for r in records)]
        if not labels:
            continue
        lines += [f"## {split}", "", "| policy | gap 20% (survival, facts whole) | gap 50% (survival, facts whole) | "
                  "fidelity KL 20% | gap vs line32, 20%, per fact | gap vs nexus, 20%, per fact | "
                  "KL vs nexus 20% |", "|---|---|---|---|---|---|---|"]
        for label in labels:
            row = [label]
            for d in DENSITIES:
                gap = mean(per_fact(records, split, label, d).values())
                surv = mean(r["metrics"].get("survival") for r in records if r["split"] == split
                            and r["suite"] == "longstream" and r["label"] == label and r["density"] == d
                            and "metrics" in r)
                whole, facts = whole_facts(records, split, label, d)
                row.append("n/a" if gap is None else f"{gap:+.2f} ({surv:.0%}, {whole}/{facts})")
            kl = mean(per_item(records, split, "fidelity", label, 0.2).values())
            row.append("n/a" if kl is None else f"{kl:.3f}")
            for other in ("nexus line32", "nexus"):
                row.append("—" if other == label else fmt(paired_facts(records, split, label, other, 0.2)))
            row.append("—" if label == "nexus" else fmt(paired(records, split, "fidelity", label, "nexus", 0.2)))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    for stage, name in (("Stage 1", "verdict.json"), ("Stage 2 (shared draws)", "verdict-shared.json")):
        if (out / name).exists():
            v = json.loads((out / name).read_text())
            m, lo, hi, n = v["best_vs_line32"]
            lines += [f"{stage} dev verdict: best candidate at 20% **{v['best']}**, vs nexus line32 {m:+.2f} "
                      f"[{lo:+.2f}, {hi:+.2f}] nats over {n} facts: the hypothesis "
                      f"{'holds' if v['holds'] else 'does not hold'} on dev.", ""]
    e = paired_facts(records, "dev", "line32 keyed t0 shared", "line32 keyed t0", 0.2)
    if e.n:
        lines += [f"Shared draws alone (line32 keyed t0 shared - line32 keyed t0, dev, 20%, per fact): {fmt(e)} nats.",
                  ""]
    text = "\n".join(lines)
    write_text_atomic(out / "line_keys.md", text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["dev", "test", "shared-dev", "shared-test", "post-hoc", "frontier", "report"])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.time()
    if args.stage != "report":
        split = "dev" if args.stage in ("post-hoc", "frontier") else args.stage.removeprefix("shared-")
        seed_records(args.out, split)
        study = Study(args.out, split)
        if args.stage == "dev":
            print(json.dumps(dev(study), indent=1))
        elif args.stage == "frontier":
            study.run("dev", FRONTIER, [0.2], suites=("longstream", "fidelity"))
        elif args.stage == "post-hoc":
            study.run("dev", POST_HOC, DENSITIES, suites=("longstream",))
            study.run("dev", POST_HOC, [0.2], suites=("fidelity",))
        elif args.stage == "shared-dev":
            print(json.dumps(dev(study, SHARED, "verdict-shared.json"), indent=1))
        else:
            test(study, "verdict-shared.json" if args.stage == "shared-test" else "verdict.json")
    print(report(args.out))
    print(f"wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
