"""CPU timings of the torch reference kernels (the path nexus takes on CPU), next to one sdpa decode step.

Llama-8B-like layer shapes (32 query heads, 8 KV heads, head_dim 128), window W=16, block b=32, keep 20%,
L = 1K..8K cached tokens, fp32 and bf16 cache. Median and min of `--reps` wall-clock runs per op, torch threads as set
by the environment. Run:  python benchmarks/kernels_cpu.py [--out benchmarks/results/kernels_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.kernels import compact_kv, reservoir_topk, set_backend, window_block_scores  # noqa: E402

HQ, HKV, D, W, B = 32, 8, 128, 16, 32
KEEP, N_DRAWS = 0.2, 5


def timed_ms(fn, reps: int) -> dict[str, float]:
    fn()  # warm-up (allocator, first-call dispatch)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return {"median": statistics.median(times), "min": min(times)}


def one_length(length: int, dtype: torch.dtype, reps: int) -> dict:
    g = torch.Generator().manual_seed(length)
    k4 = torch.randn(1, HKV, length, D, generator=g).to(dtype)
    v4 = torch.randn(1, HKV, length, D, generator=g).to(dtype)
    q = torch.randn(HQ, W, D, generator=g).to(dtype)
    q1 = torch.randn(1, HQ, 1, D, generator=g).to(dtype)
    dist, _ = window_block_scores(q, k4[0], B)
    n_blocks = math.ceil(length / B)
    weights = dist.mean(0) + 1e-6
    blocks = reservoir_topk(weights, max(1, int(KEEP * n_blocks)), N_DRAWS, 7)
    keep = (blocks[:, None] * B + torch.arange(B)[None, :]).reshape(-1)
    keep = keep[keep < length]
    ms = {
        "window_scores": timed_ms(lambda: window_block_scores(q, k4[0], B), reps),
        "window_scores_tok": timed_ms(lambda: window_block_scores(q, k4[0], B, token_scores=True), reps),
        "reservoir_topk": timed_ms(lambda: reservoir_topk(weights, len(blocks), N_DRAWS, 7), reps),
        "compact_kv": timed_ms(lambda: compact_kv(k4, v4, keep), reps),
        "decode_attention_sdpa": timed_ms(
            lambda: torch.nn.functional.scaled_dot_product_attention(q1, k4, v4, enable_gqa=True), reps),
    }
    return {"L": length, "dtype": str(dtype).removeprefix("torch."), "kept_tokens": int(keep.numel()), "ms": ms}


def markdown(result: dict) -> str:
    """The table docs/kernels.md quotes: min / median ms per op."""
    ops = ["window_scores", "window_scores_tok", "reservoir_topk", "compact_kv", "decode_attention_sdpa"]
    lines = ["| dtype | L | " + " | ".join(ops) + " |", "|---|---|" + "---|" * len(ops)]
    for row in result["rows"]:
        cells = [f"{row['ms'][op]['min']:.2f} / {row['ms'][op]['median']:.2f}" for op in ops]
        lines.append(f"| {row['dtype']} | {row['L']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/kernels_cpu.json"))
    parser.add_argument("--lengths", type=int, nargs="*", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    set_backend("torch")
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for length in args.lengths:
            rows.append(one_length(length, dtype, args.reps))
            print(json.dumps(rows[-1]), flush=True)
    result = {
        "benchmark": "benchmarks/kernels_cpu.py", "backend": "torch reference",
        "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
        "shape": {"q_heads": HQ, "kv_heads": HKV, "head_dim": D, "window": W, "block": B, "keep_fraction": KEEP,
                  "reservoir_draws": N_DRAWS},
        "timing": f"median and min of {args.reps} wall-clock runs after one warm-up, one layer per call",
        "wall_s": time.perf_counter() - t0,
        # Other processes on the machine inflate wall-clock timings; the load average says how much to trust them.
        "loadavg_1_5_15_before": load_before, "loadavg_1_5_15_after": os.getloadavg(), "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))
    print(f"wrote {args.out} in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
