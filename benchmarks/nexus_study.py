"""The Nexus study: which knobs make Nexus Sampling work on the embedded model, chosen on a dev split, reported on a
test split that was not looked at while choosing.

    python benchmarks/nexus_study.py dev    # the grid on the dev split; writes choice.json
    python benchmarks/nexus_study.py test   # the choice and the baselines on the test split, 10/20/50%
    python benchmarks/nexus_study.py traces # every test policy on all 5 test-split sessions, 20% (traces/traces.md)
    python benchmarks/nexus_study.py why-traces  # post hoc, dev sessions: what carries nexus_ht's lead on traces
    python benchmarks/nexus_study.py hajek-dev   # nexus with known inclusion probabilities, chosen on dev
    python benchmarks/nexus_study.py hajek-test  # the hajek-dev choice on the test split, all three suites
    python benchmarks/nexus_study.py report # study.md + study.png from what records.json holds

OBJECTIVE (declared before the grid ran; the choice is the configuration that maximises it on the dev split):
    J = mean over the three suites (fidelity, longstream, traces) of the improvement over `random` at 20% density,
        relative to random's own distance from dense:
        fidelity, traces:  (KL_random - KL_config) / KL_random            (KL(dense||policy), nats/token)
        longstream:        (gap_config - gap_random) / |gap_random|        (answer log-lik minus dense's, nats)
    J = 0 is random, J = 1 is dense; each suite's value is the mean over its items, so every suite weighs the same.
The grid is a coordinate search from the paper's values (nexus_paper): stage A sizes the blocks and the forced set,
stage B varies one knob at a time around stage A's winner (walk rows, H, lambda, n, top slice, hub in prefill,
prefill window). Items: dev and test come from disjoint source packages and seeds (corpus.split_packages).
Every cell is written to records.json as soon as it is done, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from nexus.evals.kv.config import SuiteSize  # noqa: E402
from nexus.evals.kv.longstream import LongStreamSuite  # noqa: E402
from nexus.evals.kv.metrics import bootstrap_mean  # noqa: E402
from nexus.evals.kv.runner import chunk_for, make_suite  # noqa: E402
from nexus.evals.kv.traces import TracesSuite  # noqa: E402
from nexus.runtime import InferenceStream, load_model, make_policy  # noqa: E402

SUITES = {"fidelity": ("kl", "lower"), "longstream": ("logprob_gap", "higher"), "traces": ("kl", "lower")}
SIZES = {  # sized for a 2-core CPU (one cell takes 20-40 s there): about 2K-token contexts, as in docs/results.md
    "fidelity": SuiteSize(items=4, context_tokens=2048, max_context_tokens=2048, continuation_tokens=48),
    "longstream": SuiteSize(items=4, context_tokens=2200, max_context_tokens=2200),
    "traces": SuiteSize(items=1, context_tokens=300, max_context_tokens=300),
}
CHUNK = 64
SEED = 0
STUDY_DENSITY = 0.2
TEST_DENSITIES = (0.1, 0.2, 0.5)

# (label, policy, params). Stage A: block size and forced set, starting from the paper.
STAGE_A = [
    ("paper", "nexus_paper", {}),
    ("b32 tok-forced", "nexus_reservoir", {"block_size": 32}),
    ("b16 tok-forced", "nexus_reservoir", {"block_size": 16}),
    ("b8 tok-forced", "nexus_reservoir", {"block_size": 8}),
]
# Stage B: one knob at a time around the stage-A winner.
# Pruned to what this machine could run in one session (one cell took 30-110 s on the shared 2-core box): H=1/8,
# lam 0/2, n=4 (~n=5), walk rows "newest", top 0.25 and the prefill window were left out; the hub in prefill is
# measured through the nexus_draft preset. carry was added while stage A ran, before any stage-B cell had run.
STAGE_B = [
    ("walk all W", {"walk_rows": "all"}), ("H=0", {"walk_steps": 0}),
    ("n=1", {"n": 1}), ("n=det", {"n": "det"}), ("top 0.5", {"top_share": 0.5}), ("carry 0.8", {"carry": 0.8}),
]
BASELINES = [("random", "random", {}), ("snapkv", "snapkv", {})]
TEST_POLICIES = [("random", "random", {}), ("snapkv", "snapkv", {}), ("h2o", "h2o", {}),
                 ("nexus_ht", "nexus_ht", {}), ("nexus_paper", "nexus_paper", {}),
                 ("nexus_draft", "nexus_draft", {}), ("nexus", "nexus_reservoir", {}),
                 # added after the choice (baselines need none), so the test table covers every registered policy
                 ("streaming_llm", "streaming_llm", {}), ("tova", "tova", {}), ("pyramidkv", "pyramidkv", {}),
                 ("ada_snapkv", "ada_snapkv", {}), ("morphkv", "morphkv", {})]
# The study's traces term is one session per split, which gives no interval. The `traces` stage runs every test
# policy on all five test-split sessions (one per test package) at 20%; intervals are over sessions, since the
# action points of one session are not independent.
TRACE_SESSIONS = 5
WIDE_SIZES = {**SIZES, "traces": dataclasses.replace(SIZES["traces"], items=TRACE_SESSIONS)}
# Post hoc, after the test traces came out (nexus level with random, nexus_ht best): which part of nexus_ht carries
# its lead? Run on the five *dev* sessions; no choice depends on these cells.
WHY_TRACES = [("random", "random", {}), ("snapkv", "snapkv", {}), ("nexus", "nexus_reservoir", {}),
              ("nexus_ht", "nexus_ht", {}), ("nexus_ht no hajek", "nexus_ht", {"hajek": False}),
              ("nexus_ht top 0", "nexus_ht", {"top_fraction": 0.0}),
              ("nexus top 0.25", "nexus_reservoir", {"top_share": 0.25})]


# The Hajek stage (added after why-traces: nexus_ht's lead on traces is its 1/pi correction, which nexus could not
# make because reservoir keys give no inclusion probabilities). nexus's design="systematic" draws blocks with known
# pi; hajek=true corrects the logits by log(1/pi). Cells run on the dev split, 20%, fidelity and longstream at SIZES
# and traces over all five dev sessions (one session, as in the grid, gives no interval).
# OBJECTIVE (written here before any of these cells ran): J as above, with the traces term over the five dev
# sessions; the new default is the cell with the highest J among the current default ("nexus") and the new cells.
# The b=1/2 cells test granularity: on random keys (tests/policies/test_nexus_systematic.py) a block of 8 averages
# its tokens' attention out and the correction has little to undo, while per token it cuts the error by a third.
HAJEK_DEV = [("random", "random", {}), ("snapkv", "snapkv", {}), ("nexus", "nexus_reservoir", {}),
             ("nexus sys", "nexus_reservoir", {"design": "systematic"}),
             ("nexus hajek", "nexus_reservoir", {"design": "systematic", "hajek": True}),
             ("nexus sys b1", "nexus_reservoir", {"design": "systematic", "block_size": 1}),
             ("nexus hajek b1", "nexus_reservoir", {"design": "systematic", "hajek": True, "block_size": 1}),
             ("nexus hajek b2", "nexus_reservoir", {"design": "systematic", "hajek": True, "block_size": 2})]


def records_path(out: Path, split: str, tag: str = "") -> Path:
    """One file per split (and per --tag), so runs can go side by side without one overwriting another's cells,
    and the test split beside the dev grid without either reading the other."""
    return out / ("records.json" if split == "dev" else f"records-test{'-' + tag if tag else ''}.json")


def load_records(out: Path) -> list[dict]:
    paths = [records_path(out, "dev"), *sorted(out.glob("records-test*.json"))]
    return [r for p in paths if p.exists() for r in json.loads(p.read_text())]


class DevLongStream(LongStreamSuite):
    """The long-stream suite without its question-first pass (half the cost; the grid ranks on the main pass)."""

    def observe(self, stream, item):
        main = self._stream(stream, item, [], curves=True)
        main["qfirst"] = main  # compare() reads it; its *_qfirst metrics are meaningless here and not reported
        return main


class Study:
    longstream_suite = DevLongStream  # the long-stream suite when its question-first pass is not run
    traces_suite = TracesSuite  # a script may swap in scripted sessions with another task (nexus_agent_anchor)

    def __init__(self, out: Path, split: str, tag: str = "", sizes: dict[str, SuiteSize] = SIZES):
        self.out = out
        self.sizes = sizes
        out.mkdir(parents=True, exist_ok=True)
        self.path = records_path(out, split, tag)
        self.records = json.loads(self.path.read_text()) if self.path.exists() else []
        self.done = {self._key(r) for r in self.records}
        self.model = self.tok = None
        self.items: dict = {}

    @staticmethod
    def _key(r: dict) -> tuple:
        return (r["split"], r["suite"], r["item"], r["label"], r["density"])

    def _load(self):
        if self.model is None:
            self.model, self.tok = load_model("embedded", device="cpu")

    def run(self, split: str, cells: list[tuple[str, str, dict]], densities, suites=tuple(SUITES),
            qfirst: bool | None = None) -> None:
        """qfirst: run the long-stream question-first pass (default: on the test split only)."""
        qfirst = split != "dev" if qfirst is None else qfirst
        for suite_name in suites:
            suite = (self.longstream_suite() if suite_name == "longstream" and not qfirst
                     else self.traces_suite() if suite_name == "traces" else make_suite(suite_name))
            key = (split, suite_name)
            todo = [(c, d) for c in cells for d in densities]
            if key not in self.items:
                self._load()
                self.items[key] = suite.build_items(self.sizes[suite_name], self.tok, SEED, split)
                self._check_items(split, suite_name, self.items[key])
            for item in self.items[key]:
                missing = [(c, d) for c, d in todo if (split, suite_name, item.id, c[0], d) not in self.done]
                if not missing:
                    continue
                self._load()
                tight = min(max(1, math.ceil(d * item.context_tokens)) for _, d in missing)
                ref = suite.observe(InferenceStream(self.model, self.tok, make_policy("dense"), budget=tight,
                                                    chunk_size=CHUNK, seed=SEED), item)
                for (label, name, params), density in missing:
                    self._cell(split, suite, item, label, name, params, density, ref)

    def _check_items(self, split: str, suite_name: str, items) -> None:
        """Cells are paired by item id: refuse to add cells when the item builder changed since earlier cells."""
        path = self.out / f"items-{split}.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        shas = {i.id: hashlib.sha256(json.dumps(i.data, sort_keys=True).encode()).hexdigest()[:16] for i in items}
        old = known.get(suite_name)
        if old is not None and old != shas:
            raise SystemExit(f"The {split} {suite_name} items differ from those the recorded cells used "
                             f"({path}); rerun into a fresh --out.")
        known[suite_name] = shas
        write_json_atomic(path, known)

    def _cell(self, split, suite, item, label, name, params, density, ref) -> None:
        budget = max(1, math.ceil(density * item.context_tokens))
        record = {"split": split, "suite": suite.name, "item": item.id, "label": label, "policy": name,
                  "params": params, "density": density, "budget": budget}
        policy = make_policy(name, **params)
        chunk = chunk_for(policy, budget, CHUNK)
        t0 = time.perf_counter()
        try:
            if chunk == 0:
                raise ValueError(f"budget {budget} leaves no room above {policy.min_budget()} forced tokens")
            stream = InferenceStream(self.model, self.tok, policy, budget=budget, chunk_size=chunk, seed=SEED)
            got = suite.observe(stream, item)
            metrics = suite.compare(item, budget, ref, got)
            record.update(chunk=chunk, metrics={k: (sum(v) / len(v) if isinstance(v, list) else v)
                                                for k, v in metrics.items() if not isinstance(v, list) or v},
                          events=stream.stats.eviction_events)
        except Exception as exc:  # a config that cannot run at this budget is a result too (NexusError, chunk)
            record["skipped"] = str(exc)
        record["seconds"] = round(time.perf_counter() - t0, 2)
        print(f"{split} {suite.name} {item.id} {label} {density:.0%}: "
              f"{record.get('metrics', {}).get(SUITES[suite.name][0], record.get('skipped'))}", flush=True)
        self.records.append(record)
        self.done.add(self._key(record))
        write_json_atomic(self.path, self.records)


# --- scoring -----------------------------------------------------------------------------------------------------
def per_item(records, split, suite, label, density) -> dict[str, float]:
    metric = SUITES[suite][0]
    return {r["item"]: r["metrics"][metric] for r in records if r["split"] == split and r["suite"] == suite
            and r["label"] == label and r["density"] == density and "metrics" in r}


def relative(records, split, suite, label, density) -> float | None:
    """The suite's term of J: improvement over random relative to random's distance from dense."""
    mine, rnd = per_item(records, split, suite, label, density), per_item(records, split, suite, "random", density)
    common = sorted(set(mine) & set(rnd))
    if not common:
        return None
    m = sum(mine[i] for i in common) / len(common)
    r = sum(rnd[i] for i in common) / len(common)
    if r == 0:
        return None
    return (r - m) / abs(r) if SUITES[suite][1] == "lower" else (m - r) / abs(r)


def objective(records, split, label, density=STUDY_DENSITY) -> float | None:
    terms = [relative(records, split, s, label, density) for s in SUITES]
    return None if any(t is None for t in terms) else sum(terms) / len(terms)


def paired(records, split, suite, label, other, density):
    """Paired bootstrap of (label - other) over items, in the suite's headline metric."""
    a, b = per_item(records, split, suite, label, density), per_item(records, split, suite, other, density)
    common = sorted(set(a) & set(b))
    return bootstrap_mean([a[i] - b[i] for i in common])


def stage_b_cells(winner: tuple[str, str, dict]) -> list[tuple[str, str, dict]]:
    label, name, params = winner
    base = {**params} if name == "nexus_reservoir" else {}
    return [(f"{label} + {lab}", "nexus_reservoir", {**base, **knob}) for lab, knob in STAGE_B]


def dev(study: Study) -> dict:
    cells_a = BASELINES + STAGE_A
    study.run("dev", cells_a, [STUDY_DENSITY])
    scores_a = {c[0]: objective(study.records, "dev", c[0]) for c in STAGE_A}
    winner_a = max((c for c in STAGE_A if scores_a[c[0]] is not None), key=lambda c: scores_a[c[0]])
    if winner_a[1] != "nexus_reservoir":  # stage B varies nexus knobs: start from the paper's values as knobs
        from nexus.runtime.policies.nexus import PAPER
        winner_a = (winner_a[0], "nexus_reservoir", dict(PAPER))
    cells_b = stage_b_cells(winner_a)
    study.run("dev", cells_b, [STUDY_DENSITY])
    every = STAGE_A + cells_b
    scores = {c[0]: objective(study.records, "dev", c[0]) for c in every}
    best = max((c for c in every if scores[c[0]] is not None), key=lambda c: scores[c[0]])
    choice = {"label": best[0], "policy": best[1], "params": best[2], "objective": scores[best[0]],
              "stage_a_winner": winner_a[0], "scores": scores}
    write_json_atomic(study.out / "choice.json", choice)
    return choice


def test(study: Study, only: list[str] | None) -> None:
    """20% first (the headline), then 10% and 50%; `only` restricts the labels (the baselines need no choice)."""
    cells = [c for c in TEST_POLICIES if not only or c[0] in only]
    for density in sorted(TEST_DENSITIES, key=lambda d: d != STUDY_DENSITY):
        study.run("test", cells, [density])


def traces_dir(out: Path, split: str = "test") -> Path:
    return out / ("traces" if split == "test" else f"traces-{split}")


def wide_traces(out: Path, split: str = "test", cells=TEST_POLICIES) -> None:
    study = Study(traces_dir(out, split), split, sizes=WIDE_SIZES)
    study.run(split, cells, [STUDY_DENSITY], suites=("traces",))


def traces_report(out: Path, split: str = "test") -> str:
    folder = traces_dir(out, split)
    path = records_path(folder, split)
    if not path.exists():
        return ""
    records = json.loads(path.read_text())
    labels = list(dict.fromkeys(r["label"] for r in records))
    lines = [f"# Traces, {split} split, {STUDY_DENSITY:.0%}: every session", "",
             "KL(dense||policy) nats/token at the action points past the budget, mean per session; intervals are "
             "paired 95% bootstrap over sessions (the points of one session are not independent).", "",
             "| policy | sessions | mean KL | vs random (paired) | vs snapkv (paired) | vs nexus (paired) |",
             "|---|---|---|---|---|---|"]
    for label in labels:
        mine = per_item(records, split, "traces", label, STUDY_DENSITY)
        mean_kl = f"{sum(mine.values()) / len(mine):.3f}" if mine else "n/a"
        versus = [fmt(paired(records, split, "traces", label, other, STUDY_DENSITY)) if label != other else "—"
                  for other in ("random", "snapkv", "nexus")]
        lines.append(f"| {label} | {len(mine)} | {mean_kl} | " + " | ".join(versus) + " |")
    seconds = sum(r.get("seconds", 0) for r in records)
    lines += ["", f"Policy runs: {len(records)} cells, {seconds / 60:.1f} min of policy time."]
    text = "\n".join(lines) + "\n"
    write_text_atomic(folder / "traces.md", text)
    return text


def hajek_dir(out: Path) -> Path:
    return out / "hajek"


def hajek_dev(out: Path) -> dict:
    """The dev cells; the traces cells of labels why-traces already ran on the same sessions are taken from its
    records (identical policy, seed and items: the item hashes are carried over, so a changed builder stops the
    run instead of pairing different items)."""
    study = Study(hajek_dir(out), "dev", sizes=WIDE_SIZES)
    if not study.records:
        source = traces_dir(out, "dev")
        items = json.loads((source / "items-dev.json").read_text())
        write_json_atomic(study.out / "items-dev.json", {"traces": items["traces"]})
        reused = [r for r in json.loads(records_path(source, "dev").read_text())
                  if r["label"] in ("random", "snapkv", "nexus")]
        study.records, study.done = reused, {study._key(r) for r in reused}
        write_json_atomic(study.path, study.records)
    study.run("dev", HAJEK_DEV, [STUDY_DENSITY])
    candidates = [c for c in HAJEK_DEV if c[1] == "nexus_reservoir"]
    scores = {c[0]: objective(study.records, "dev", c[0]) for c in candidates}
    best = max((c for c in candidates if scores[c[0]] is not None), key=lambda c: scores[c[0]])
    choice = {"label": best[0], "policy": best[1], "params": best[2], "objective": scores[best[0]], "scores": scores}
    write_json_atomic(study.out / "choice.json", choice)
    return choice


def hajek_test(out: Path) -> None:
    """The hajek-dev choice on the test split: 10/20/50% like every test policy (records-test-hajek.json beside
    the others, so the study report pairs it with them), then traces over the five test sessions."""
    c = json.loads((hajek_dir(out) / "choice.json").read_text())
    cell = [(f"{c['label']} (hajek-dev choice)", c["policy"], c["params"])]
    study = Study(out, "test", "hajek")
    for density in sorted(TEST_DENSITIES, key=lambda d: d != STUDY_DENSITY):
        study.run("test", cell, [density])
    wide_traces(out, "test", cell)


def hajek_report(out: Path) -> str:
    folder = hajek_dir(out)
    if not records_path(folder, "dev").exists():
        return ""
    records = json.loads(records_path(folder, "dev").read_text())
    lines = ["# Nexus with known inclusion probabilities (dev split, 20%)", "",
             "J as in the study, traces over the five dev sessions; paired 95% bootstrap intervals over items "
             "(fidelity, longstream: 4 each; traces: 5 sessions).", "",
             "| config | J | " + " | ".join(f"{s} vs random" for s in SUITES) + " | "
             + " | ".join(f"{s} vs nexus" for s in SUITES) + " |", "|---|---|" + "---|" * (2 * len(SUITES))]
    for label in dict.fromkeys(r["label"] for r in records):
        j = objective(records, "dev", label)
        cells = [fmt(paired(records, "dev", s, label, other, STUDY_DENSITY)) if label != other else "—"
                 for other in ("random", "nexus") for s in SUITES]
        lines.append(f"| {label} | {'n/a' if j is None else f'{j:+.3f}'} | " + " | ".join(cells) + " |")
    choice = folder / "choice.json"
    if choice.exists():
        c = json.loads(choice.read_text())
        lines += ["", f"Chosen on dev: **{c['label']}** (J = {c['objective']:+.3f}), params {c['params']}."]
    seconds = sum(r.get("seconds", 0) for r in records)
    lines += ["", f"Policy runs: {len(records)} cells, {seconds / 60:.1f} min of policy time."]
    text = "\n".join(lines) + "\n"
    write_text_atomic(folder / "hajek.md", text)
    return text


# --- report ------------------------------------------------------------------------------------------------------
def fmt(e) -> str:
    return "n/a" if e.n == 0 else f"{e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"


def report(out: Path) -> str:
    records = load_records(out)
    lines = ["# Nexus study", "", "Objective J (declared before the grid ran, see benchmarks/nexus_study.py): mean "
             "over fidelity, longstream and traces of the improvement over random at 20%, relative to random's "
             "distance from dense (0 = random, 1 = dense).", ""]
    for split, densities in (("dev", [STUDY_DENSITY]), ("test", list(TEST_DENSITIES))):
        labels = list(dict.fromkeys(r["label"] for r in records if r["split"] == split))
        if not labels:
            continue
        for density in densities:
            lines += [f"## {split} split, {density:.0%} density", "",
                      "| config | J | " + " | ".join(f"{s} {SUITES[s][0]} vs random (paired)" for s in SUITES)
                      + " | " + " | ".join(f"{s} vs snapkv" for s in SUITES) + " |",
                      "|---|---|" + "---|" * (2 * len(SUITES))]
            for label in labels:
                j = objective(records, split, label, density)
                vs_r = [fmt(paired(records, split, s, label, "random", density)) for s in SUITES]
                vs_s = [fmt(paired(records, split, s, label, "snapkv", density)) for s in SUITES]
                skipped = {r["skipped"] for r in records if r["split"] == split and r["label"] == label
                           and r["density"] == density and "skipped" in r}
                name = label + (f" (skipped: {min(skipped)})" if skipped else "")  # min: the same line every run
                lines.append(f"| {name} | {'n/a' if j is None else f'{j:+.3f}'} | " + " | ".join(vs_r + vs_s) + " |")
            lines.append("")
    choice = out / "choice.json"
    if choice.exists():
        c = json.loads(choice.read_text())
        lines += [f"Chosen on dev: **{c['label']}** (J = {c['objective']:+.3f}), params {c['params']}.", ""]
    seconds = sum(r.get("seconds", 0) for r in records)
    lines.append(f"Policy runs: {len(records)} cells, {seconds / 60:.1f} min of policy time (dense references "
                 "not counted).")
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / "study.md", text)
    _plot(records, out)
    return text


def _plot(records, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(r["label"] for r in records if r["split"] == "dev"))
    scores = [objective(records, "dev", lab) for lab in labels]
    pairs = [(lab, s) for lab, s in zip(labels, scores) if s is not None]
    if not pairs:
        return
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(pairs) + 1.5))
    ax.barh([p[0] for p in pairs], [p[1] for p in pairs], color="tab:blue")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("J on the dev split (0 = random, 1 = dense)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out / "study.png", dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["dev", "test", "traces", "why-traces", "hajek-dev", "hajek-test", "report"])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/nexus_study"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", default="", help="test: comma list of labels to run (default: all)")
    ap.add_argument("--tag", default="", help="test: write records-test-TAG.json (for a run beside another)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    if args.stage == "hajek-dev":
        print(json.dumps(hajek_dev(args.out), indent=1))
        print(hajek_report(args.out))
    elif args.stage == "hajek-test":
        hajek_test(args.out)
        print(traces_report(args.out, "test"))
        print(report(args.out))
    elif args.stage in ("traces", "why-traces"):
        split, cells = ("test", TEST_POLICIES) if args.stage == "traces" else ("dev", WHY_TRACES)
        wide_traces(args.out, split, cells)
        print(traces_report(args.out, split))
    else:
        study = Study(args.out, "test" if args.stage == "test" else "dev", args.tag)
        if args.stage == "dev":
            print(json.dumps(dev(study), indent=1))
        elif args.stage == "test":
            test(study, [x for x in args.only.split(",") if x])
        print(report(args.out))
    print(f"wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
