"""Summarize a benchmarks/gpu_check.sh run: DIR/gpu_check.json plus a short table on stdout.

Reads what each stage left in DIR (stages.jsonl, pytest junit XML, kernels_gpu.json, paper_scale.json, the
embedded-model suites' summaries) for the stages this run recorded in stages.jsonl — a file an earlier run left in
DIR is never reported as this run's — and reports only what is there; a missing or failed stage says so.

    python benchmarks/gpu_summary.py DIR [--smoke]
"""
from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit(path: Path) -> dict | None:
    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    cases = []
    for case in suite.iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or "")[:300]
                break
        else:
            message = ""
        props = {p.get("name"): float(p.get("value")) for p in case.iter("property")}
        cases.append({"test": case.get("name"), "outcome": outcome, "message": message, **props})
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")}
    return {"counts": counts, "cases": cases}


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def kernels(result: dict | None, smoke: bool) -> list[dict]:
    rows = []
    for r in (result or {}).get("rows", []):
        ms = r.get("ms", {})
        rows.append({"L": r["L"], "window_scores_ms": ms.get("window_scores_triton"),
                     "window_scores_fraction_of_hbm_peak": (r["k_read_roofline_ms"] / ms["window_scores_triton"]
                                                            if ms.get("window_scores_triton") and smoke is False
                                                            else None),
                     "window_scores_vs_measured_k_read": r.get("window_scores_vs_k_read_measured"),
                     "compact_inplace_gbs": r.get("compact_inplace_triton_gbs"),
                     "decode_attention_ms": ms.get("decode_attention_sdpa"),
                     "max_abs_err_dist": r.get("max_abs_err_dist"), "compact_exact": r.get("compact_exact")})
    return rows


def fidelity(out: Path) -> dict:
    found = {}
    for sub in sorted(out.glob("fidelity_*")):
        summary = sub / "fidelity" / "records.json"
        if summary.is_file():
            recs = json.loads(summary.read_text())
            by_policy: dict[str, list[float]] = {}
            for rec in recs:
                by_policy.setdefault(rec["policy"], []).append(rec["metrics"]["kl"])
            found[sub.name] = {p: sum(v) / len(v) for p, v in by_policy.items()}
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    out = args.out
    stages = [json.loads(line) for line in (out / "stages.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "stages.jsonl").is_file() else []
    ran = {s["step"] for s in stages if s["rc"] is not None}

    def this_run(step: str, value):
        return value if step in ran else None

    kernel_json = this_run("kernels_bench", load(out / "kernels_gpu.json") or load(out / "kernels_gpu_cpu_smoke.json"))
    scale = this_run("paper_scale", load(out / "paper_scale.json"))
    cpu_ref = load(Path(__file__).parent / "results" / "gpu" / "cpu_reference_fidelity_ci.json")
    summary = {
        "smoke": args.smoke, "stages": stages,
        "device": (kernel_json or scale or {}).get("device_name") or (kernel_json or {}).get("device"),
        "kernel_tests": this_run("kernel_tests", junit(out / "kernel_tests.xml")),
        "kernels": kernels(kernel_json, args.smoke),
        "cuda_tests": this_run("cuda_tests", junit(out / "cuda_tests.xml")),
        "embedded_tests": this_run("embedded_tests", junit(out / "embedded_tests.xml")),
        "paper_scale": scale,
        "fidelity_kl_gpu": {k: v for k, v in fidelity(out).items() if k in ran},
        "fidelity_kl_cpu_reference": (cpu_ref or {}).get("kl"),
    }
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(out / "gpu_check.json")

    print(f"gpu_check summary ({summary['device']}):")
    for s in stages:
        print(f"  {s['step']:<18} rc={s['rc']} {s['seconds']} s {s.get('skipped', '')}")
    for name in ("kernel_tests", "cuda_tests", "embedded_tests"):
        if summary[name]:
            print(f"  {name}: {summary[name]['counts']}")
            for c in summary[name]["cases"]:
                if c["outcome"] in ("failed", "error"):
                    print(f"    {c['outcome']}: {c['test']}: {c['message'][:150]}")
    for r in summary["kernels"]:
        frac = r["window_scores_fraction_of_hbm_peak"]
        print(f"  L={r['L']:>6}: window scores {r['window_scores_ms']} ms"
              + (f" = {frac:.0%} of HBM peak for one K read" if frac else ""))
    for r in (summary["paper_scale"] or {}).get("rows", []):
        print(f"  {r['policy']:<12} L={r['tokens_seen']:>6}: {r['decode_tokens_per_s']:.1f} tok/s "
              f"(x{r.get('decode_throughput_vs_dense', float('nan')):.2f} dense), eviction "
              f"{r['eviction_share_of_decode']:.1%} of decode, KV {r['kv_bytes_allocated'] / 2**20:.0f} MiB")
    for name, kl in summary["fidelity_kl_gpu"].items():
        print(f"  {name}: mean KL " + ", ".join(f"{p} {v:.3f}" for p, v in kl.items())
              + (f" (CPU fp32: {', '.join(f'{p} {v:.3f}' for p, v in cpu_ref['kl'].items())})" if cpu_ref else ""))
    failed = [s for s in stages if s["rc"] not in (0, None)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
