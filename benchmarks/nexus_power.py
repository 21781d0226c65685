"""Does today's `nexus` beat random on the long-stream suite at 20%? The same question on three times the items.

    python benchmarks/nexus_power.py run     # 12 test-split long-stream items x {random, snapkv, nexus} x {20%, 50%}
    python benchmarks/nexus_power.py report  # power.md from the records

WHY. The acceptance line of the Nexus issue is met on two suites of three at 20% on the test split; on the third,
long-stream, today's `nexus` leads random by +0.48 [-0.54, +1.50] nats over the study's 4 test items
(benchmarks/results/nexus_window/window.md). Four items cannot tell a small effect from none. This script makes no
choice: the default is fixed (chosen on dev by the window stage's rule), and it only measures it with more items.

ITEMS. The long-stream builder of the test split with 12 items instead of 4 (seed 0, 2.2K tokens, chunk 64, as the
study): its items are built in sequence, so long-000..003 are the study's 4 test items (checked against
benchmarks/results/nexus_study/items-test.json) and long-004..011 are 8 items no run has used. The question-first
pass is skipped (it does not enter the headline).

OBJECTIVE (declared here before any cell ran). Primary: nexus - random, long-stream answer log-likelihood gap at 20%,
paired over the 12 items (each item's gap is the mean of its 3 facts), 95% bootstrap; "beats random beyond noise"
iff the interval's lower end is above 0. Reported beside it, no verdict depending on them: the same on the 8 unused
items alone, nexus - snapkv, the per-fact pairs, 50% (the two-hop kind there is the held-out hint's case), facts
kept whole, and final survival per kind.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus_joint import stage_cli  # noqa: E402
from nexus_line_keys import KINDS, paired_facts  # noqa: E402
from nexus_lines import fmt, mean, whole_facts  # noqa: E402
from nexus_study import SIZES, Study, paired, per_item  # noqa: E402

from nexus.atomic import write_text_atomic  # noqa: E402
from nexus.evals.kv.metrics import bootstrap_mean  # noqa: E402

OUT = Path("benchmarks/results/nexus_power")
STUDY = Path("benchmarks/results/nexus_study")
ITEMS = 12
SEEN = ("long-000", "long-001", "long-002", "long-003")  # the study's test items (run before, never chosen on)
CELLS = [("random", "random", {}), ("snapkv", "snapkv", {}), ("nexus", "nexus", {})]
DENSITIES = (0.2, 0.5)


def run(out: Path) -> None:
    sizes = {**SIZES, "longstream": dataclasses.replace(SIZES["longstream"], items=ITEMS)}
    study = Study(out, "test", sizes=sizes)
    study.run("test", [], list(DENSITIES), suites=("longstream",), qfirst=False)  # builds and hashes the items
    check_seen(out)
    study.run("test", CELLS, list(DENSITIES), suites=("longstream",), qfirst=False)


def check_seen(out: Path) -> None:
    """The first four items must be the study's test items (same hashes): else 'unused' would not mean unused."""
    ours = json.loads((out / "items-test.json").read_text())["longstream"]
    study = json.loads((STUDY / "items-test.json").read_text())["longstream"]
    if {i: ours[i] for i in SEEN} != {i: study[i] for i in SEEN}:
        raise SystemExit("The first four long-stream test items differ from the study's; the seen/unused split "
                         "below would be wrong.")


def paired_on(records, label: str, other: str, density: float, items=None):
    a = per_item(records, "test", "longstream", label, density)
    b = per_item(records, "test", "longstream", other, density)
    common = sorted(i for i in set(a) & set(b) if items is None or i in items)
    return bootstrap_mean([a[i] - b[i] for i in common])


def report(out: Path) -> str:
    path = out / "records-test.json"
    if not path.exists():
        return "no records yet"
    records = json.loads(path.read_text())
    unused = {r["item"] for r in records} - set(SEEN)
    lines = ["# Long-stream at 12 test items (benchmarks/nexus_power.py)", "",
             "| policy, density | gap (facts whole) | " + " | ".join(f"{k} gap (survival)" for k in KINDS) + " |",
             "|---|---|" + "---|" * len(KINDS)]
    for density in DENSITIES:
        for label, _, _ in CELLS:
            recs = [r["metrics"] for r in records if r["label"] == label and r["density"] == density
                    and r["suite"] == "longstream" and "metrics" in r]
            if not recs:
                continue
            whole, facts = whole_facts(records, "test", label, density)
            cells = [f"{mean(m[f'logprob_gap_{k}'] for m in recs):+.2f} ({mean(m[f'survival_{k}'] for m in recs):.0%})"
                     for k in KINDS]
            lines.append(f"| {label}, {density:.0%} | {mean(m['logprob_gap'] for m in recs):+.2f} ({whole}/{facts}) | "
                         + " | ".join(cells) + " |")
    lines += ["", "Paired differences, nats (95% bootstrap; per item = mean of its 3 facts):", "",
              "| comparison, density | all 12 items | 8 unused items | per fact (all items) |", "|---|---|---|---|"]
    for density in DENSITIES:
        for other in ("random", "snapkv"):
            lines.append(f"| nexus - {other}, {density:.0%} | {fmt(paired(records, 'test', 'longstream', 'nexus', other, density))} | "
                         f"{fmt(paired_on(records, 'nexus', other, density, unused))} | "
                         f"{fmt(paired_facts(records, 'test', 'nexus', other, density))} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / "power.md", text)
    return text


def main() -> None:
    stage_cli(__doc__, OUT, {"run": run}, report)


if __name__ == "__main__":
    main()
