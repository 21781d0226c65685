"""benchmarks/gpu_check.sh --smoke runs on CPU, so the one-command GPU check cannot rot between GPU leases."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_smoke_runs_and_summarizes_only_this_run(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    out.mkdir()
    # A file an earlier run left behind must not be reported as this run's.
    (out / "kernels_gpu.json").write_text(json.dumps({"device": "stale", "rows": [{"L": 1, "ms": {}}]}))
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--smoke", "--stages", "cuda,scale", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert [(s["step"], s["rc"]) for s in summary["stages"]] == [("cuda_tests", 0), ("paper_scale", 0)]
    assert summary["kernels"] == [] and summary["kernel_tests"] is None
    cuda = summary["cuda_tests"]["counts"]
    assert cuda["passed"] >= 1 and cuda["failed"] == 0 and cuda["error"] == 0
    rows = summary["paper_scale"]["rows"]
    assert {r["policy"] for r in rows} >= {"dense", "nexus", "snapkv"}
    longest = max(r["tokens_seen"] for r in rows)
    kv = {r["policy"]: r["kv_bytes_allocated"] for r in rows if r["tokens_seen"] == longest}
    assert kv["nexus"] < kv["dense"] and kv["snapkv"] < kv["dense"]
    assert "gpu_check summary" in done.stdout


def test_gpu_check_refuses_unknown_arguments() -> None:
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--bogus"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--bogus" in done.stderr
