"""Line-aligned eviction: does keeping or dropping whole source lines let Nexus Sampling keep facts at small budgets?

    python benchmarks/nexus_lines.py dev     # the candidates (and one control) on the dev split; writes choice.json
    python benchmarks/nexus_lines.py test    # the choice and today's nexus on the test split, 10/20/50%
    python benchmarks/nexus_lines.py report  # lines.md from the records

WHY. The Nexus study (docs/results.md) found that a planted fact is answered only when its whole line survives:
large blocks (b32, b64) keep a line all or nothing by chance, which is the whole ~2-nat lead of the paper presets
over snapkv at 50%, while today's default (b8, best on fidelity) splits a 15-25-token fact line into 2-4
independent draws and keeps none whole at 20%. `unit="line"` scores exactly as before (the last W queries, the
walk, lambda, n-averaged reservoir keys) but over source lines of at most max_line tokens, sampled by attention per
token (a line costs its length) and taken whole while they fit. b32 blocks are the control: coarse units that are
not aligned to lines.

OBJECTIVE (declared before the grid below ran; the same rule as benchmarks/nexus_persist.py): among
    nexus          today's default (b8 blocks)
    nexus line32   unit line, max_line 32
    nexus line16   unit line, max_line 16 (fact lines of 15-25 tokens are cut in two: tests the "whole line" account)
choose the one with the highest mean long-stream answer log-likelihood gap to dense (nats) on the dev split,
averaged over 20% and 50% density; a candidate is ruled out if its fidelity KL at 20% is worse than nexus's beyond
noise (paired 95% interval above 0). If the choice is not `nexus`, it becomes the default and is run once on the test
split (fidelity, long-stream and traces at 10/20/50%) beside today's nexus; the baselines' test cells are the
Nexus study's (same items, checked by hash). Report as it comes out. Items, sizes, chunk and seeds are the Nexus
study's; the long-stream question-first pass is skipped (not what this compares).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus_study import TEST_DENSITIES, Study, objective, paired, per_item  # noqa: E402

from nexus.atomic import write_json_atomic, write_text_atomic  # noqa: E402

CANDIDATES = [("nexus", "nexus_reservoir", {}), ("nexus line32", "nexus_reservoir", {"unit": "line", "max_line": 32}),
              ("nexus line16", "nexus_reservoir", {"unit": "line", "max_line": 16})]
CONTROL = ("nexus b32 (control)", "nexus_reservoir", {"block_size": 32})
DENSITIES = (0.2, 0.5)
OUT = Path("benchmarks/results/nexus_lines")
STUDY = Path("benchmarks/results/nexus_study")
PERSIST = Path("benchmarks/results/nexus_persist")
BASELINES = ("random", "snapkv", "h2o", "nexus_ht", "nexus_paper", "nexus_draft")


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def copy_records(out: Path, split: str, src: Path, labels: set[str]) -> None:
    """Start out's records of this split with src's cells for `labels` (once: kept if out already has records). The
    item hashes come along, so Study refuses to add cells if the item builder has changed since."""
    name = "records.json" if split == "dev" else "records-test.json"
    if (out / name).exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    records = [r for r in json.loads((src / name).read_text()) if r["label"] in labels]
    shutil.copyfile(src / f"items-{split}.json", out / f"items-{split}.json")
    write_json_atomic(out / name, records)


def seed_records(out: Path, split: str) -> None:
    """Reuse cells measured on the same items by the same code: today's nexus on dev (nexus_persist ran it after the
    last change to its sampling), the baselines on test (the Nexus study)."""
    copy_records(out, split, *((PERSIST, {"nexus"}) if split == "dev" else (STUDY, set(BASELINES))))


def dev(study: Study) -> dict:
    study.run("dev", CANDIDATES + [CONTROL], DENSITIES, suites=("longstream",))
    study.run("dev", CANDIDATES + [CONTROL], [0.2], suites=("fidelity",))
    scores, ruled_out = {}, {}
    for label, _, _ in CANDIDATES:
        scores[label] = mean(mean(per_item(study.records, "dev", "longstream", label, d).values())
                             for d in DENSITIES)
        if label != "nexus":
            e = paired(study.records, "dev", "fidelity", label, "nexus", 0.2)
            if e.n and e.low > 0:
                ruled_out[label] = f"fidelity KL worse than nexus: {e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"
    allowed = [c for c in CANDIDATES if c[0] not in ruled_out and scores[c[0]] is not None]
    best = max(allowed, key=lambda c: scores[c[0]])
    choice = {"label": best[0], "policy": best[1], "params": best[2], "scores": scores, "ruled_out": ruled_out}
    write_json_atomic(study.out / "choice.json", choice)
    return choice


def test(study: Study) -> None:
    choice = json.loads((study.out / "choice.json").read_text())
    cells = [("nexus", "nexus_reservoir", {})] + ([] if choice["label"] == "nexus" else
                                       [(choice["label"], choice["policy"], choice["params"])])
    for density in sorted(TEST_DENSITIES, key=lambda d: d != 0.2):  # 20% first: the headline
        study.run("test", cells, [density], suites=("fidelity", "longstream"), qfirst=False)
    study.run("test", cells, list(TEST_DENSITIES), suites=("traces",))


def whole_facts(records, split, label, density) -> tuple[int, int]:
    """(facts kept whole at the end of the stream, facts): per-kind final survival of 1."""
    kinds = ("single", "twohop", "reref")
    vals = [r["metrics"].get(f"survival_{k}") for r in records if r["split"] == split and r["suite"] == "longstream"
            and r["label"] == label and r["density"] == density and "metrics" in r for k in kinds]
    vals = [v for v in vals if v is not None]
    return sum(v >= 0.999 for v in vals), len(vals)


def fmt(e) -> str:
    return "—" if not e.n else f"{e.mean:+.2f} [{e.low:+.2f}, {e.high:+.2f}]"


def report(out: Path) -> str:
    records = [r for name in ("records.json", "records-test.json") if (out / name).exists()
               for r in json.loads((out / name).read_text())]
    lines = ["# Line-aligned eviction (benchmarks/nexus_lines.py)", ""]
    for split, densities in (("dev", DENSITIES), ("test", TEST_DENSITIES)):
        labels = [lab for lab in dict.fromkeys(r["label"] for r in records) if any(
            r["label"] == lab and r["split"] == split for r in records)]
        if not labels:
            continue
        for d in densities:
            lines += [f"## {split}, {d:.0%}", "", "| policy | longstream gap (survival, facts whole) | "
                      "fidelity KL | traces KL | J | gap vs nexus | gap vs snapkv | KL vs nexus | KL vs snapkv |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for label in labels:
                gap = mean(per_item(records, split, "longstream", label, d).values())
                surv = mean(r["metrics"].get("survival") for r in records if r["split"] == split
                            and r["suite"] == "longstream" and r["label"] == label and r["density"] == d
                            and "metrics" in r)
                whole, facts = whole_facts(records, split, label, d)
                kl = mean(per_item(records, split, "fidelity", label, d).values())
                tr = mean(per_item(records, split, "traces", label, d).values())
                j = objective(records, split, label, d) if split == "test" else None
                cells = [label, "n/a" if gap is None else f"{gap:+.2f} ({surv:.0%}, {whole}/{facts})",
                         "n/a" if kl is None else f"{kl:.3f}", "n/a" if tr is None else f"{tr:.3f}",
                         "n/a" if j is None else f"{j:+.3f}"]
                for suite in ("longstream", "fidelity"):
                    for other in ("nexus", "snapkv"):
                        cells.append("—" if other == label else fmt(paired(records, split, suite, label, other, d)))
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    choice = out / "choice.json"
    if choice.exists():
        c = json.loads(choice.read_text())
        lines += [f"Chosen on dev: **{c['label']}**; objective (mean longstream gap over 20% and 50%): "
                  + ", ".join(f"{k} {v:+.2f}" for k, v in c["scores"].items() if v is not None)
                  + (f"; ruled out: {c['ruled_out']}" if c["ruled_out"] else ""), ""]
    text = "\n".join(lines)
    write_text_atomic(out / "lines.md", text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["dev", "test", "report"])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.time()
    if args.stage != "report":
        seed_records(args.out, args.stage)
        study = Study(args.out, args.stage)
        print(json.dumps(dev(study), indent=1) if args.stage == "dev" else test(study))
    print(report(args.out))
    print(f"wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
