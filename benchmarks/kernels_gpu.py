"""GPU benchmark of the eviction kernels vs their torch references and vs one decode attention step.

Shapes are Llama-3.1-8B-like per layer: 32 query heads, 8 KV heads, head_dim 128, bf16, window W=16, block b=32,
keep 20% of the cache. For L in 4K..64K it times (median ms, L2 flushed before every call by do_bench):
  window_block_scores (Triton, with and without token scores) and its torch reference on the same GPU,
  reading K once (torch.sum over K) and the HBM roofline for that read (K bytes / peak bandwidth),
  compact_kv (Triton vs torch gather) and compact_kv_into in place in the cache buffer, with achieved GB/s,
  reservoir_topk over the L/32 block weights (Triton vs torch),
  one decode attention step of one layer: torch sdpa (flash/efficient kernel) with a single query.
It also records the max difference between Triton and the reference outputs at each L.

Run on a CUDA machine:  python benchmarks/kernels_gpu.py  [--out benchmarks/results/kernels_gpu.json]
Writes JSON and a PNG plot next to it. Designed to finish in well under 5 minutes on an H200.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

if "--cpu-smoke" in sys.argv:  # exercise this script's logic with the Triton interpreter; timings meaningless
    os.environ["TRITON_INTERPRET"] = "1"

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.kernels import (compact_kv, compact_kv_into, reservoir_topk, set_backend,  # noqa: E402
                           window_block_scores)

HQ, HKV, D, W, B = 32, 8, 128, 16, 32
KEEP = 0.2
N_DRAWS = 5
LENGTHS = [4096, 16384, 32768, 65536]
TIME_LIMIT_S = 240.0  # stop adding measurements after this; the JSON says which were skipped
DEV = "cuda"


def bench_ms(fn) -> float:
    if DEV != "cuda":
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


def host_ms(fn, calls: int = 20) -> float | None:
    """Host (Python + launch) time per call, GPU work left queued; None off CUDA."""
    if DEV != "cuda":
        return None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e3


def graph_ms(fn) -> float | None:
    """GPU time of fn replayed from a CUDA graph, or None if it cannot be captured."""
    if DEV != "cuda":
        return None
    try:
        import triton.testing
        return float(triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median"))
    except Exception as exc:  # noqa: BLE001 - a capture failure is a result to report, not a crash
        print(f"kernels_gpu: CUDA graph capture failed: {exc!r}", file=sys.stderr)
        return None


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def with_backend(name: str, fn):
    def run():
        set_backend(name)
        return fn()
    return run


def sdpa_decode(q1: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor):
    fn = torch.nn.functional.scaled_dot_product_attention
    try:
        fn(q1, k4, v4, enable_gqa=True)
        return lambda: fn(q1, k4, v4, enable_gqa=True), "sdpa(enable_gqa)"
    except (RuntimeError, TypeError):  # older kernels without GQA: expand the KV heads once, outside the timing
        ke = k4.repeat_interleave(HQ // HKV, dim=1)
        ve = v4.repeat_interleave(HQ // HKV, dim=1)
        return lambda: fn(q1, ke, ve), "sdpa(expanded kv)"


def one_length(length: int, peak_gbs: float, t0: float) -> dict:
    dev = DEV
    g = torch.Generator(device=dev).manual_seed(length)
    k4 = torch.randn(1, HKV, length, D, device=dev, generator=g, dtype=torch.bfloat16)
    v4 = torch.randn(1, HKV, length, D, device=dev, generator=g, dtype=torch.bfloat16)
    q = torch.randn(HQ, W, D, device=dev, generator=g, dtype=torch.bfloat16)
    keys = k4[0]
    k_bytes = keys.numel() * keys.element_size()
    row: dict = {"L": length, "k_bytes": k_bytes, "k_read_roofline_ms": k_bytes / (peak_gbs * 1e9) * 1e3}
    timings: dict[str, float | None] = {}

    def measure(name: str, fn) -> None:
        if time.perf_counter() - t0 > TIME_LIMIT_S:
            timings[name] = None
            return
        fn()  # compile / warm outside the timing
        sync()
        timings[name] = bench_ms(fn)

    measure("read_k_once_torch_sum", lambda: keys.sum())
    measure("window_scores_triton", with_backend("triton", lambda: window_block_scores(q, keys, B)))
    measure("window_scores_tok_triton",
            with_backend("triton", lambda: window_block_scores(q, keys, B, token_scores=True)))
    measure("window_scores_torch", with_backend("torch", lambda: window_block_scores(q, keys, B)))
    # Python launch cost can hide behind or add to GPU time: record host time per call, and GPU time with the
    # launches replayed from a CUDA graph (no host overhead at all).
    set_backend("triton")
    row["window_scores_host_ms_per_call"] = host_ms(lambda: window_block_scores(q, keys, B))
    timings["window_scores_triton_cudagraph"] = graph_ms(lambda: window_block_scores(q, keys, B))

    n_blocks = math.ceil(length / B)
    set_backend("triton")
    dist, tok = window_block_scores(q, keys, B, token_scores=True)
    set_backend("torch")
    ref_dist, ref_tok = window_block_scores(q, keys, B, token_scores=True)
    row["max_abs_err_dist"] = float((dist - ref_dist).abs().max())
    row["max_abs_err_tok"] = float((tok - ref_tok).abs().max())

    weights = dist.mean(0) + 1e-6
    k_blocks = max(1, int(KEEP * n_blocks))
    measure("reservoir_topk_triton", with_backend("triton", lambda: reservoir_topk(weights, k_blocks, N_DRAWS, 7)))
    measure("reservoir_topk_torch", with_backend("torch", lambda: reservoir_topk(weights, k_blocks, N_DRAWS, 7)))
    set_backend("triton")
    blocks = reservoir_topk(weights, k_blocks, N_DRAWS, 7)
    set_backend("torch")
    row["topk_equal_triton_vs_torch"] = bool(torch.equal(blocks, reservoir_topk(weights, k_blocks, N_DRAWS, 7)))
    keep = (blocks[:, None] * B + torch.arange(B, device=dev)[None, :]).reshape(-1)
    keep = keep[keep < length]
    moved = 2 * 2 * keep.numel() * HKV * D * k4.element_size()  # K and V, read + write
    row["compact_bytes"] = moved
    row["compact_kept_tokens"] = int(keep.numel())
    measure("compact_triton", with_backend("triton", lambda: compact_kv(k4, v4, keep)))
    measure("compact_torch", with_backend("torch", lambda: compact_kv(k4, v4, keep)))
    # In place in a preallocated cache buffer (the runtime's layout); repeated calls keep moving the same bytes.
    kb, vb = k4.clone(), v4.clone()
    measure("compact_inplace_triton", with_backend("triton", lambda: compact_kv_into(kb, vb, keep, kb, vb)))
    measure("compact_inplace_torch", with_backend("torch", lambda: compact_kv_into(kb, vb, keep, kb, vb)))
    del kb, vb
    set_backend("triton")
    ck, cv = compact_kv(k4, v4, keep)
    set_backend("torch")
    rk, rv = compact_kv(k4, v4, keep)
    row["compact_exact"] = bool(torch.equal(ck, rk) and torch.equal(cv, rv))

    q1 = torch.randn(1, HQ, 1, D, device=dev, generator=g, dtype=torch.bfloat16)
    decode_fn, decode_name = sdpa_decode(q1, k4, v4)
    row["decode_kernel"] = decode_name
    measure("decode_attention_sdpa", decode_fn)
    set_backend("auto")

    row["ms"] = timings
    ms = timings
    if ms.get("window_scores_triton"):
        row["window_scores_vs_k_roofline"] = ms["window_scores_triton"] / row["k_read_roofline_ms"]
        row["window_scores_k_gbs"] = k_bytes / (ms["window_scores_triton"] * 1e-3) / 1e9
        if ms.get("read_k_once_torch_sum"):
            row["window_scores_vs_k_read_measured"] = ms["window_scores_triton"] / ms["read_k_once_torch_sum"]
        if ms.get("decode_attention_sdpa"):
            row["window_scores_vs_decode_attention"] = ms["window_scores_triton"] / ms["decode_attention_sdpa"]
    for name in ("compact_triton", "compact_torch", "compact_inplace_triton", "compact_inplace_torch"):
        if ms.get(name):
            row[f"{name}_gbs"] = moved / (ms[name] * 1e-3) / 1e9
    if ms.get("read_k_once_torch_sum"):
        row["read_k_once_gbs"] = k_bytes / (ms["read_k_once_torch_sum"] * 1e-3) / 1e9
    del k4, v4, keys
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return row


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = ["window_scores_triton", "window_scores_tok_triton", "window_scores_torch", "compact_triton",
             "compact_torch", "compact_inplace_triton", "reservoir_topk_triton", "decode_attention_sdpa",
             "read_k_once_torch_sum"]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [r["L"] for r in rows]
    for name in names:
        ys = [r["ms"].get(name) for r in rows]
        pts = [(x, y) for x, y in zip(xs, ys) if y]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=name)
    ax.plot(xs, [r["k_read_roofline_ms"] for r in rows], "k--", label="K read at peak HBM bw")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cached tokens L (per layer)")
    ax.set_ylabel("ms (median, L2 flushed)")
    ax.set_title("nexus eviction kernels, 32q/8kv heads, D=128, bf16, W=16, b=32")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/kernels_gpu.json"))
    parser.add_argument("--peak-gbs", type=float, default=4800.0, help="HBM peak to compare with (H200: 4800)")
    parser.add_argument("--lengths", type=int, nargs="*", default=LENGTHS)
    parser.add_argument("--time-limit", type=float, default=240.0,
                        help="stop adding measurements after this many seconds (skipped ones are null in the JSON)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="run the script's logic on CPU under TRITON_INTERPRET at tiny L (checks, not timings)")
    args = parser.parse_args()
    global DEV, TIME_LIMIT_S
    TIME_LIMIT_S = args.time_limit
    if args.cpu_smoke:
        DEV = "cpu"
        args.lengths = [100, 300]
        args.out = args.out.with_name("kernels_gpu_cpu_smoke.json")
    elif not torch.cuda.is_available():
        print("kernels_gpu: no CUDA device; this benchmark needs a GPU (see benchmarks/kernels_cpu.py)")
        return 2
    import triton
    t0 = time.perf_counter()
    rows = []
    for length in args.lengths:
        rows.append(one_length(length, args.peak_gbs, t0))
        print(json.dumps({k: v for k, v in rows[-1].items()}, default=str), flush=True)
    result = {
        "benchmark": "benchmarks/kernels_gpu.py",
        "device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu smoke run (timings meaningless)",
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "shape": {"q_heads": HQ, "kv_heads": HKV, "head_dim": D, "window": W, "block": B, "dtype": "bfloat16",
                  "keep_fraction": KEEP, "reservoir_draws": N_DRAWS},
        "peak_hbm_gbs": args.peak_gbs,
        "timing": "triton.testing.do_bench median, L2 flushed before each call; one layer per call. "
                  "window_scores_triton_cudagraph: do_bench_cudagraph median, L2 NOT flushed (K fits in L2 at "
                  "4K/16K), no host overhead. window_scores_host_ms_per_call: Python + launch time per call.",
        "wall_s": time.perf_counter() - t0,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')} in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
