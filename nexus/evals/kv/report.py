"""Summaries (means with 95% bootstrap intervals over items), sanity checks and markdown tables."""

from __future__ import annotations

import math
import time
from pathlib import Path

from nexus.atomic import write_text_atomic
from nexus.evals.kv.config import SUITES
from nexus.evals.kv.metrics import Estimate, beyond_noise, bootstrap_mean
from nexus.evals.kv.runner import DENSE_BUDGET, make_suite
from nexus.evals.kv.speed import flatness
from nexus.evals.kv.store import read_json

MIB = 2**20


def _values(records: list[dict], key: str) -> list[float]:
    out: list[float] = []
    for r in records:
        v = r.get("metrics", {}).get(key)
        if isinstance(v, list):
            out += v
        elif v is not None:
            out.append(v)
    return out


def summarize_suite(out_dir: Path, suite: str) -> dict:
    if suite == "speed":
        return summarize_speed(out_dir)
    base = Path(out_dir) / suite
    run = read_json(base / "run.json")
    records = read_json(base / "records.json") if (base / "records.json").exists() else []
    spec = make_suite(suite)
    budgets = run["budgets"]
    policies = run["policies"]
    # only items every (policy, budget) cell has reached are compared, so all rows rest on the same items
    wanted = {(p, DENSE_BUDGET if p == "dense" else b) for p in policies for b in budgets}
    have: dict[str, set] = {}
    for r in records:
        have.setdefault(r["item"], set()).add((r["policy"], r["budget"]))
    complete = {item for item, cells_done in have.items() if wanted <= cells_done}
    partial = sorted(set(have) - complete)
    if complete:
        records = [r for r in records if r["item"] in complete]
    # else (an interrupted run that finished no item): every cell shows what it has, and says so through its n
    cells: dict[str, dict[str, dict]] = {}
    for label in budgets:
        cells[label] = {}
        for policy in policies:
            want = DENSE_BUDGET if policy == "dense" else label
            rows = [r for r in records if r["policy"] == policy and r["budget"] == want]
            ok = [r for r in rows if "metrics" in r]
            if not rows:
                continue
            cell = {"items": len(ok), "skipped": len(rows) - len(ok),
                    "skip_reason": next((r["skipped"] for r in rows if "skipped" in r), None),
                    "density": (sum(r["density"] for r in ok) / len(ok)) if ok and policy != "dense" else 1.0,
                    "seconds": sum(r.get("seconds", 0.0) for r in ok),
                    "metrics": {m.key: bootstrap_mean(_values(ok, m.key)).as_dict() for m in spec.metrics}}
            known = {m.key for m in spec.metrics}
            extra = sorted({k for r in ok for k in r["metrics"] if k not in known})
            cell["extra"] = {k: bootstrap_mean(_values(ok, k)).as_dict() for k in extra}  # e.g. per-task scores
            cells[label][policy] = cell
    summary = {"suite": suite, "command": run.get("command", ""), "settings": run, "policies": policies,
               "budgets": budgets, "headline": spec.headline, "complete_items": len(complete),
               "partial_items": partial,
               "metrics": [{"key": m.key, "label": m.label, "better": m.better, "scale": m.scale}
                           for m in spec.metrics],
               "cells": cells}
    summary["sanity"] = sanity(summary, records)
    curves = survival_curves(records, budgets, policies)
    if curves:
        summary["survival_curves"] = curves
    return summary


def survival_curves(records: list[dict], budgets: list[str], policies: list[str]) -> dict:
    """Per budget and policy: mean survival of the planted facts after k eviction events since each was planted
    (longstream), with how many facts reached k events; dense is shown under every budget, like in the cells."""
    out: dict = {}
    for label in budgets:
        for policy in policies:
            want = DENSE_BUDGET if policy == "dense" else label
            curves = [c for r in records if r["policy"] == policy and r["budget"] == want
                      for c in r.get("detail", {}).get("survival_curves", {}).values()]
            if not curves:
                continue
            n = [sum(len(c) > k for c in curves) for k in range(max(map(len, curves)))]
            mean = [sum(c[k] for c in curves if len(c) > k) / n[k] for k in range(len(n))]
            out.setdefault(label, {})[policy] = {"mean": mean, "n": n}
    return out


def _headline_better(summary: dict) -> str:
    """"lower" or "higher": which direction is better on the suite's headline metric."""
    return next(m["better"] for m in summary["metrics"] if m["key"] == summary["headline"])


def _est(d: dict) -> Estimate:
    lo, hi = d["ci95"]
    return Estimate(d["mean"], lo, hi, d["n"])


def sanity(summary: dict, records: list[dict]) -> dict:
    """Dense against itself must be exact; random should be the worst policy on the headline metric."""
    dense = [r for r in records if r["policy"] == "dense" and "metrics" in r]
    out: dict = {"dense_items": len(dense)}
    if "kl" in {m["key"] for m in summary["metrics"]}:
        kls = _values(dense, "kl")
        out["dense_max_kl"] = max(kls) if kls else None
    for key in ("top1", "same_answer", "same_first_line", "survival"):
        vals = _values(dense, key)
        if vals:
            out[f"dense_min_{key}"] = min(vals)
    head = summary["headline"]
    out["paired_vs_random"] = {}
    for label in summary["cells"]:
        # per-item (per-point) differences policy - random on the headline, paired on the same items: much
        # tighter than comparing two marginal intervals, since items differ far more than policies do
        want = DENSE_BUDGET
        rnd = {r["item"]: r["metrics"][head] for r in records if r["policy"] == "random" and r["budget"] == label
               and "metrics" in r}
        pairs = {}
        for name in summary["policies"]:
            if name == "random" or not rnd:
                continue
            diffs: list[float] = []
            for r in records:
                if r["policy"] != name or r["budget"] != (want if name == "dense" else label) or "metrics" not in r:
                    continue
                a, b = r["metrics"][head], rnd.get(r["item"])
                if b is None:
                    continue
                a, b = (a, b) if isinstance(a, list) else ([a], [b])
                diffs += [x - y for x, y in zip(a, b)]
            if diffs:
                pairs[name] = bootstrap_mean(diffs).as_dict()
        if pairs:
            out["paired_vs_random"][label] = pairs
    out["random_worst"] = random_worst(summary, out["paired_vs_random"])
    return out


def random_worst(summary: dict, paired: dict) -> dict:
    """Per budget: is random worst on the headline, and which policies beat it beyond noise (paired interval)."""
    head, better = summary["headline"], _headline_better(summary)
    out = {}
    for label, cells in summary["cells"].items():
        if "random" not in cells or not cells["random"]["items"]:
            continue
        rnd = _est(cells["random"]["metrics"][head])
        pairs = paired.get(label, {})
        not_beaten, beyond = [], []
        for name, cell in cells.items():
            if name == "random" or not cell["items"]:
                continue
            other = _est(cell["metrics"][head])
            worse = rnd.mean > other.mean if better == "lower" else rnd.mean < other.mean
            if not worse:
                not_beaten.append(name)
            elif _paired_beyond_noise(pairs[name], better) if name in pairs else beyond_noise(rnd, other):
                beyond.append(name)
        out[label] = {"worst": not not_beaten, "not_worse_than": not_beaten, "beyond_noise_vs": beyond}
    return out


def _paired_beyond_noise(diff: dict, better: str) -> bool:
    """The paired (policy - random) interval lies wholly on the 'better' side of zero."""
    low, high = diff["ci95"]
    return high < 0 if better == "lower" else low > 0


def summarize_speed(out_dir: Path) -> dict:
    base = Path(out_dir) / "speed"
    run = read_json(base / "run.json")
    rows = read_json(base / "records.json") if (base / "records.json").exists() else []
    labels = {r["budget"] for r in rows if r["policy"] != "dense"}

    def key(r: dict) -> str:  # one curve per stream: the policy, plus its budget when several were run
        return r["policy"] if r["policy"] == "dense" or len(labels) <= 1 else f"{r['policy']}@{r['budget']}"

    policies = list(dict.fromkeys(key(r) for r in rows))
    per_policy = {}
    for name in policies:
        mine = sorted((r for r in rows if key(r) == name), key=lambda r: r["tokens_seen"])
        per_policy[name] = {"rows": mine, "cache_bytes": flatness(mine, "cache_bytes"),
                            "stored_bytes": flatness(mine, "stored_bytes")}
    checks = {}
    for name, info in per_policy.items():
        mine = info["rows"]
        if name == "dense":
            per_token = mine[-1]["stored_bytes"] / mine[-1]["tokens_seen"] if mine else 0
            checks[name] = {"linear": all(r["stored_bytes"] == round(per_token * r["tokens_seen"]) for r in mine),
                            "bytes_per_token": per_token}
        else:
            budget_bytes = mine[0]["budget_bytes"] if mine else None
            budget = mine[0]["budget_tokens"] if mine else 0
            # between eviction events a stream holds up to one decode period (tau) more than the budget
            slack = max((r.get("decode_period", 16) for r in mine), default=16)
            checks[name] = {"flat": len({r["cache_bytes"] for r in mine}) == 1,
                            "stored_within_budget": all(r["tokens_stored"] <= budget + slack for r in mine),
                            "budget_bytes": budget_bytes}
    return {"suite": "speed", "command": run.get("command", ""), "settings": run, "policies": policies,
            "per_policy": per_policy, "sanity": checks}


def _fmt(d: dict, scale: float) -> str:
    e = _est(d)
    digits = 1 if scale >= 100 else 3 if abs(e.mean) < 100 else 1
    return e.fmt(scale, digits)


def suite_table(summary: dict) -> str:
    if summary["suite"] == "speed":
        return speed_table(summary)
    metrics = summary["metrics"]
    done, partial = summary.get("complete_items"), summary.get("partial_items")
    if done:
        head = f"{done} item(s) with every cell done" + (
            f"; left out as incomplete: {', '.join(partial)}" if partial else "") + "."
    else:
        head = (f"No item has every cell done yet (run interrupted); cells show the items they reached: "
                f"{', '.join(partial)}.")
    lines = [f"### {summary['suite']}", "", head, ""]
    for label, cells in summary["cells"].items():
        lines += [f"Budget {label} of each item's context (dense: everything). Mean [95% bootstrap CI].", "",
                  "| policy | density | n | " + " | ".join(m["label"] for m in metrics) + " |",
                  "|---|---|---|" + "---|" * len(metrics)]
        for name, cell in cells.items():
            if not cell["items"]:
                lines.append(f"| {name} | - | 0 | " + " | ".join("n/a" for _ in metrics) +
                             f" |  <!-- skipped: {cell['skip_reason']} -->")
                continue
            vals = " | ".join(_fmt(cell["metrics"][m["key"]], m["scale"]) for m in metrics)
            lines.append(f"| {name} | {cell['density']:.0%} | {cell['metrics'][metrics[0]['key']]['n']} | {vals} |")
        breakdown = _breakdown(cells)
        if breakdown:
            lines += ["", breakdown]
        skipped = {n: c["skip_reason"] for n, c in cells.items() if c["skipped"]}
        for name, why in skipped.items():
            lines.append(f"\n{name}: {cells[name]['skipped']} item(s) skipped: {why}")
        lines.append("")
    s = summary["sanity"]
    lines.append(f"Sanity: dense vs dense max KL = {s.get('dense_max_kl')}; " +
                 "; ".join(f"{k} = {v}" for k, v in s.items() if k.startswith("dense_min")) + ".")
    for label, r in s.get("random_worst", {}).items():
        verdict = "worst" if r["worst"] else f"not worse than {', '.join(r['not_worse_than'])}"
        others = len(summary["cells"][label]) - 1
        lines.append(f"random at {label}: {verdict} on {summary['headline']} "
                     f"(beyond noise, paired, against {len(r['beyond_noise_vs'])} of {others}).")
    for label, pairs in s.get("paired_vs_random", {}).items():
        head, better = summary["headline"], _headline_better(summary)
        lines += ["", f"Paired difference policy - random on {head} at {label} (same items; 95% bootstrap CI; "
                      f"{'negative' if better == 'lower' else 'positive'} = better than random):", ""]
        lines.append(" | ".join(f"{n} {_fmt(d, 1)}" for n, d in pairs.items()))
    return "\n".join(lines) + "\n"


def _breakdown(cells: dict) -> str:
    """Per-task answer log-likelihood gaps (retrieval, longstream): which kind of needle a policy loses; with the
    final survival of its planted lines where the suite measures it (longstream)."""
    tasks = sorted({k[len("logprob_gap_"):] for c in cells.values() for k in c.get("extra", {})
                    if k.startswith("logprob_gap_")})
    if not tasks:
        return ""
    surv = any(f"survival_{t}" in c.get("extra", {}) for c in cells.values() for t in tasks)
    cols = [f"{t} gap | {t} EM" + (f" | {t} survival %" if surv else "") for t in tasks]
    lines = [f"Answer log-lik gap (policy - dense, nats) and exact match %{' and final survival %' if surv else ''} "
             "per task:", "", "| policy | " + " | ".join(cols) + " |",
             "|---|" + ("---|---|---|" if surv else "---|---|") * len(tasks)]
    for name, cell in cells.items():
        if not cell["items"]:
            continue
        ex = cell["extra"]
        vals = []
        for t in tasks:
            vals.append(_fmt(ex[f"logprob_gap_{t}"], 1) if f"logprob_gap_{t}" in ex else "n/a")
            vals.append(_fmt(ex[f"em_{t}"], 100) if f"em_{t}" in ex else "n/a")
            if surv:
                vals.append(_fmt(ex[f"survival_{t}"], 100) if f"survival_{t}" in ex else "n/a")
        lines.append(f"| {name} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def speed_table(summary: dict) -> str:
    lines = ["### speed", "",
             "| policy | tokens seen | stored | prefill tok/s | decode tok/s | eviction s (total) | cache MiB | "
             "stored MiB | peak RSS MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for name, info in summary["per_policy"].items():
        for r in info["rows"]:
            rss = r["peak_rss_bytes"] / MIB if r["peak_rss_bytes"] else math.nan
            lines.append(f"| {name} | {r['tokens_seen']} | {r['tokens_stored']} | {r['prefill_tokens_per_s']:.0f} | "
                         f"{r['decode_tokens_per_s']:.1f} | {r['eviction_seconds_total']:.2f} | "
                         f"{r['cache_bytes'] / MIB:.1f} | {r['stored_bytes'] / MIB:.1f} | {rss:.0f} |")
    lines.append("")
    for name, c in summary["sanity"].items():
        slope = summary["per_policy"][name]["cache_bytes"]["slope_bytes_per_token"]
        lines.append(f"- {name}: " + ", ".join(f"{k} = {v}" for k, v in c.items()) +
                     f", cache growth {slope:.0f} bytes per token seen")
    return "\n".join(lines) + "\n"


def write_suite_table(out_dir: Path, suite: str, summary: dict) -> Path:
    path = Path(out_dir) / suite / "table.md"
    write_text_atomic(path, suite_table(summary))
    return path


def write_report(out_dir: Path, doc: Path | None = None, title: str = "KV-eviction results",
                 notes: str = "") -> str:
    """One markdown file for every suite in `out_dir` (out_dir/report.md, and `doc` if given); `notes` (markdown)
    goes after the tables."""
    parts = [f"# {title}", "", f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from {out_dir}.", ""]
    for suite in SUITES:
        path = Path(out_dir) / suite / "summary.json"
        if not path.exists():
            continue
        summary = read_json(path)
        parts += [f"Command: `{summary.get('command', '')}`", "", suite_table(summary)]
    if notes:
        parts += [notes.rstrip(), ""]
    text = "\n".join(parts)
    write_text_atomic(Path(out_dir) / "report.md", text)
    if doc is not None:
        write_text_atomic(Path(doc), text)
    return text
