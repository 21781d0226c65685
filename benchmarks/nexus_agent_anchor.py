"""The task anchor in an agent's stream: does scoring every event with the task message keep what the next action
needs?

    python benchmarks/nexus_agent_anchor.py dev     # the cells on the five dev sessions; writes verdict.json
    python benchmarks/nexus_agent_anchor.py test    # only if the anchor won on dev: the five test sessions, once
    python benchmarks/nexus_agent_anchor.py long-issue  # the agent's 64-token cap on a long issue, both splits
    python benchmarks/nexus_agent_anchor.py report  # agent_anchor.md from the records

WHY. On the long-stream suite's question-first pass the task anchor (`anchor_tokens`, benchmarks/nexus_anchor.py)
beat `nexus` by +1.35 [+0.50, +2.16] nats per fact at 20% on test: what the task asks about survives more often
when every event also asks it. A coding agent's stream has a task too: `nexus solve` and `nexus repl` open with the
system prompt and then the task message (the issue). Whether the anchor helps there, where what matters is the
next action rather than a planted fact, was not measured, so the agent does not use it. The agent's task does not
sit at the stream's head (the system prompt does, and asks nothing about this repository), so the anchor is placed
on the task message with `anchor_start` (its first token's offset) and `anchor_tokens` (its length).

SETTING. The traces suite (scripted sessions on real repositories, replayed as `nexus solve` would put them in the
stream: system prompt, task message, then action/observation turns; next-action KL(dense||policy) at every action
point past the budget), the Nexus study's sizes, chunk 64 and seed, all five sessions of each split, 20%. The task
message's span is measured by the agent's own `task_span` (the stream's chat rendering of the two opening
messages; the runs of 2026-12-07 streamed them through the model and got the same span): it starts at token 257
and is 51 tokens long in every session (the scripted issue is the same). random, snapkv and today's `nexus` are
copied from benchmarks/results/nexus_window (its "nexus recent64" cells, today's `nexus` knobs; same
items by hash).

CELLS: `nexus task` (anchor_start 257, anchor_tokens 51) and `nexus +77`, the memory-matched control: 51 recorded
queries per layer take the memory of 77 tokens of KV (51 x 9 query heads / (2 x 3 KV heads)), so `nexus` at a
density of 0.226 (20% plus 77 tokens of a ~2.95K session; budgets 572-630).

OBJECTIVE (declared here before any of these cells ran). Primary: `nexus task` - `nexus`, next-action KL at 20%,
paired over the five dev sessions (each session's KL is the mean over its action points), 95% bootstrap. Rule: if
the interval's upper end is below 0 on dev, the two cells run once on the five test sessions; if there too the
interval is below 0, `nexus solve` and `nexus repl` anchor the task message by default when their policy is nexus
(a caller's own anchor knobs win). Reported as it comes out either way; no verdict depends on the rest: the anchor
against the memory-matched `nexus +77`, against random and snapkv, and the share of points whose greedy first line
equals dense's.

OUTCOME (2026-12-07): dev -0.037 [-0.072, -0.009], test -0.062 [-0.085, -0.040] (against nexus +77: -0.024
[-0.033, -0.016]), so the agent anchors its task message by default, cut at 64 tokens (nexus/agent/task_anchor.py).

STAGE 2, LONG ISSUE (declared here before any of its cells ran; a measurement of the default, no choice). Every
session above has a one-line issue, so the whole task message (51 tokens) was the anchor; real issues are longer,
and the agent cuts the anchor at its first 64 tokens (the message header and the issue's opening), which was not
measured. The same ten sessions (dev and test), the same scripted actions, but the task is LONG_ISSUE below (a
GitHub-style report of the same bug: title, traceback, steps, expected behaviour; 229 tokens). CELLS at 20%:
`nexus`, `nexus task64` (the agent's default: the first 64 tokens of the task message) and `nexus task all` (the
whole task message; its memory, 1.5 x its length in tokens of KV, is reported, not matched). Reported: both
against `nexus` and against each other, paired over the ten sessions (dev and test pooled: nothing is chosen, so
neither split is held out). GUARD RULE: if `nexus task64` - `nexus` is above 0 beyond noise (the cut anchor hurts),
the agent stops anchoring a task longer than the cap; otherwise the default stands as it is.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus_joint import stage_cli  # noqa: E402
from nexus_study import STUDY_DENSITY, WIDE_SIZES, Study, paired, per_item, records_path  # noqa: E402
from nexus_study import fmt  # noqa: E402  (three decimals: KL differences are small)

from nexus.agent.task_anchor import task_span  # noqa: E402
from nexus.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from nexus.evals.kv.metrics import bootstrap_mean  # noqa: E402
from nexus.evals.kv.traces import TracesSuite  # noqa: E402

OUT = Path("benchmarks/results/nexus_agent_anchor")
WINDOW = Path("benchmarks/results/nexus_window")  # today's nexus, random and snapkv on the same sessions
TASK_START, TASK_TOKENS = 257, 51  # the task message's span in every scripted session (checked by task_span)
TASK = ("nexus task", "nexus", {"anchor_start": TASK_START, "anchor_tokens": TASK_TOKENS})
MATCHED = ("nexus +77", "nexus", {})
MATCHED_DENSITY = 0.226  # 20% + 77 tokens of a ~2.95K-token session
LABELS = ("random", "snapkv", "nexus", TASK[0], MATCHED[0])
LONG_ISSUE = """mean() crashes on an empty list

When I call `mathutils.mean([])` I get an exception instead of a number:

```
Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "mathutils.py", line 6, in mean
    return sum(values) / len(values)
ZeroDivisionError: division by zero
```

Steps to reproduce:
1. python -c "import mathutils; print(mathutils.mean([]))"
2. See the traceback above.

Expected behaviour: the mean of an empty list is 0, which is what the report scripts assume when a period has no
samples. The test test_mean_empty in tests/test_mathutils.py covers this case and fails today. The other helpers in
the module (clamp, moving_average) behave as documented. Environment: Python 3.12 on Linux."""
LONG = Path("long_issue")  # the stage's records, beside the first stage's


def session_span(study: Study, split: str) -> tuple[int, int]:
    """The task message's (offset, length) in the split's sessions (the agent's own task_span), one sentence
    unless every session has the same."""
    study._load()
    items = study.traces_suite().build_items(WIDE_SIZES["traces"], study.tok, 0, split)
    spans = {task_span(study.tok, i.data["messages"]) for i in items}
    if len(spans) != 1:
        raise SystemExit(f"The task messages span {sorted(spans)}: expected one span in every session.")
    return spans.pop()


def seed_records(out: Path, split: str) -> None:
    """Start the split's records with the window stage's traces cells (once): random, snapkv, and its
    "nexus recent64" (today's nexus knobs) relabelled "nexus"."""
    path = records_path(out, split)
    if path.exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    rename = {"random": "random", "snapkv": "snapkv", "nexus recent64": "nexus"}
    records = [{**r, "label": rename[r["label"]]} for r in json.loads(records_path(WINDOW, split).read_text())
               if r["suite"] == "traces" and r["label"] in rename and r["split"] == split]
    items = json.loads((WINDOW / f"items-{split}.json").read_text())
    write_json_atomic(out / f"items-{split}.json", {"traces": items["traces"]})
    write_json_atomic(path, records)


def run(out: Path, split: str) -> Study:
    seed_records(out, split)
    study = Study(out, split, sizes=WIDE_SIZES)
    spans = {session_span(study, split)}
    if spans != {(TASK_START, TASK_TOKENS)}:
        raise SystemExit(f"The task messages span {sorted(spans)}, not ({TASK_START}, {TASK_TOKENS}): the prompts "
                         "changed since the objective was declared; declare it again.")
    study.run(split, [TASK], [STUDY_DENSITY], suites=("traces",))
    study.run(split, [MATCHED], [MATCHED_DENSITY], suites=("traces",))
    return study


def verdict(records, split: str) -> dict:
    e = paired(records, split, "traces", TASK[0], "nexus", STUDY_DENSITY)
    return {"task_vs_nexus_20": [e.mean, e.low, e.high, e.n], "holds": bool(e.n and e.high < 0)}


def dev(out: Path) -> dict:
    v = verdict(run(out, "dev").records, "dev")
    write_json_atomic(out / "verdict.json", v)
    return v


def test(out: Path) -> dict:
    if not json.loads((out / "verdict.json").read_text())["holds"]:
        raise SystemExit("The task anchor did not beat nexus beyond noise on dev (verdict.json): by the declared "
                         "rule there is no test run.")
    v = verdict(run(out, "test").records, "test")
    write_json_atomic(out / "verdict-test.json", v)
    return v


class LongIssueStudy(Study):
    traces_suite = staticmethod(lambda: TracesSuite(issue=LONG_ISSUE))


def long_issue(out: Path) -> dict:
    """Stage 2 (see the docstring): the agent's cut anchor and the whole task message on a long issue."""
    folder, result = out / LONG, {}
    for split in ("dev", "test"):
        study = LongIssueStudy(folder, split, sizes=WIDE_SIZES)
        start, length = session_span(study, split)
        result[split] = {"task_start": start, "task_tokens": length}
        cells = [("nexus", "nexus", {}), ("nexus task64", "nexus", {"anchor_start": start, "anchor_tokens": 64}),
                 ("nexus task all", "nexus", {"anchor_start": start, "anchor_tokens": length})]
        study.run(split, cells, [STUDY_DENSITY], suites=("traces",))
    records = [r for split in ("dev", "test") for r in json.loads(records_path(folder, split).read_text())]
    pairs = {}
    for a, b in (("nexus task64", "nexus"), ("nexus task all", "nexus"), ("nexus task all", "nexus task64")):
        diffs = []
        for split in ("dev", "test"):
            x, y = per_item(records, split, "traces", a, STUDY_DENSITY), per_item(records, split, "traces", b,
                                                                                  STUDY_DENSITY)
            diffs += [x[i] - y[i] for i in sorted(set(x) & set(y))]
        e = bootstrap_mean(diffs)
        pairs[f"{a} - {b}"] = [e.mean, e.low, e.high, e.n]
    result["pairs"] = pairs
    result["cut_anchor_hurts"] = pairs["nexus task64 - nexus"][1] > 0
    write_json_atomic(folder / "verdict.json", result)
    return result


def long_issue_report(folder: Path) -> list[str]:
    if not (folder / "verdict.json").exists():
        return []
    v = json.loads((folder / "verdict.json").read_text())
    lines = [f"## Stage 2: a long issue ({v['dev']['task_tokens']}-token task message from token "
             f"{v['dev']['task_start']}), ten sessions, 20%", "", "| policy | dev KL | test KL | seconds per session |",
             "|---|---|---|---|"]
    records = {split: json.loads(records_path(folder, split).read_text()) for split in ("dev", "test")}
    for label in ("nexus", "nexus task64", "nexus task all"):
        kls = [list(per_item(records[split], split, "traces", label, STUDY_DENSITY).values()) for split in records]
        secs = [r["seconds"] for split in records for r in records[split] if r["label"] == label]
        lines.append(f"| {label} | " + " | ".join(f"{sum(k) / len(k):.3f}" for k in kls)
                     + f" | {sum(secs) / len(secs):.1f} |")
    lines += ["", "| paired over the ten sessions | mean [95% CI] |", "|---|---|"]
    lines += [f"| {pair} | {m:+.3f} [{lo:+.3f}, {hi:+.3f}] |" for pair, (m, lo, hi, _) in v["pairs"].items()]
    lines += ["", f"Guard rule: the cut anchor {'hurts' if v['cut_anchor_hurts'] else 'does not hurt'} beyond noise; "
              f"{'the agent stops anchoring long tasks' if v['cut_anchor_hurts'] else 'the default stands'}.", ""]
    return lines


def _cell(records, split, label):
    density = MATCHED_DENSITY if label == MATCHED[0] else STUDY_DENSITY
    return per_item(records, split, "traces", label, density), density


def report(out: Path) -> str:
    lines = ["# The task anchor in an agent's stream (benchmarks/nexus_agent_anchor.py)", "",
             f"Traces suite, five sessions per split, 20% (`{MATCHED[0]}`: {MATCHED_DENSITY:.1%}, memory-matched); "
             "next-action KL(dense||policy) nats/token, lower is better; intervals paired over sessions.", ""]
    for split in ("dev", "test"):
        path = records_path(out, split)
        if not path.exists():
            continue
        records = json.loads(path.read_text())
        lines += [f"## {split}", "", "| policy | KL | same first line as dense | - nexus | - random | - snapkv | "
                  f"- {MATCHED[0]} |", "|---|---|---|---|---|---|---|"]
        for label in LABELS:
            kl, density = _cell(records, split, label)
            if not kl:
                continue
            same = [r["metrics"]["same_first_line"] for r in records if r["label"] == label and "metrics" in r
                    and r["suite"] == "traces"]
            diffs = []
            for other in ("nexus", "random", "snapkv", MATCHED[0]):
                theirs, _ = _cell(records, split, other)
                common = sorted(set(kl) & set(theirs))
                diffs.append("—" if other == label else fmt(bootstrap_mean([kl[i] - theirs[i] for i in common])))
            lines.append(f"| {label} | {sum(kl.values()) / len(kl):.3f} | {sum(same) / len(same):.0%} | "
                         + " | ".join(diffs) + " |")
        lines.append("")
    lines += long_issue_report(out / LONG)
    for name in ("verdict.json", "verdict-test.json"):
        if (out / name).exists():
            v = json.loads((out / name).read_text())
            m, lo, hi, n = v["task_vs_nexus_20"]
            lines += [f"{name}: nexus task - nexus at 20% {m:+.3f} [{lo:+.3f}, {hi:+.3f}] over {n} sessions; "
                      f"{'beyond noise' if v['holds'] else 'not beyond noise'}.", ""]
    text = "\n".join(lines)
    write_text_atomic(out / "agent_anchor.md", text)
    return text


def main() -> None:
    stage_cli(__doc__, OUT, {"dev": dev, "test": test, "long-issue": long_issue}, report)


if __name__ == "__main__":
    main()
