"""The paper's scale by geometry: decode speed and KV memory of a Llama-3.1-8B-shaped model, dense vs evicting.

Speed does not depend on the weights' values, so the model is Llama-3.1-8B's configuration (32 layers, 32 query /
8 KV heads, head_dim 128, llama3 RoPE scaling to 128K positions) with random bf16 weights built in GPU memory: no
download. For each length L (tokens seen) and policy, a fresh InferenceStream is prefilled with L random token ids
in chunks (evicting policies at `--density` x L tokens per layer), then decodes `--decode-tokens` greedy tokens.
Recorded per cell: decode tokens/s, the share of decode wall time spent in eviction (timed with device syncs around
each eviction), prefill seconds, peak GPU memory above the weights, and KV bytes allocated/stored per sequence.

The token ids are fed directly, so the tokenizer is nexus.runtime.id_tokenizer's stand-in (1:1 word-level).

GPU:    python benchmarks/paper_scale.py --out benchmarks/results/gpu/paper_scale.json
Smoke:  python benchmarks/paper_scale.py --smoke --out /tmp/paper_scale_smoke.json   (tiny config on CPU, seconds)
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.runtime import InferenceStream, make_policy  # noqa: E402
from nexus.runtime.id_tokenizer import id_tokenizer  # noqa: E402

LLAMA31_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192})
SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=512, max_position_embeddings=4096)
# What the paper reports for its method against dense decoding (../shared/nexus-method.md).
PAPER = {"decode_throughput_vs_dense": [1.22, 1.30], "kv_cache_smaller_by": [5, 10]}


def build_model(geometry: dict, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**geometry, tie_word_embeddings=False)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(saved)
    model.eval()
    model.generation_config.eos_token_id = -1  # random weights must not stop a timed decode early
    return model


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed_evictions(stream: InferenceStream, device: str) -> list[float]:
    """Wrap the stream's eviction so each call is timed between device syncs; returns the list it appends to."""
    spent: list[float] = []
    inner = stream._evict

    def evict(phase: str = "prefill") -> None:
        sync(device)
        t0 = time.perf_counter()
        inner(phase)
        sync(device)
        spent.append(time.perf_counter() - t0)

    stream._evict = evict
    return spent


def one_cell(model, tok, policy: str, length: int, args, weights_bytes: int) -> dict:
    dev = args.device
    budget = length + args.decode_tokens + 64 if policy == "dense" else max(1, int(args.density * length))
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    stream = InferenceStream(model, tok, make_policy(policy), budget=budget, chunk_size=args.chunk, seed=0)
    evictions = timed_evictions(stream, dev)
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(3, model.config.vocab_size, (length,), generator=g).tolist()
    sync(dev)
    t0 = time.perf_counter()
    stream.append(ids)
    sync(dev)
    prefill_s = time.perf_counter() - t0
    stream.generate(args.warmup_tokens)  # warm the decode path (kernels, allocator) outside the timing
    evictions.clear()
    sync(dev)
    t0 = time.perf_counter()
    out = stream.generate(args.decode_tokens)
    sync(dev)
    decode_s = time.perf_counter() - t0
    row = {
        "policy": policy, "tokens_seen": length, "budget_tokens": stream.budget, "chunk": args.chunk,
        "prefill_s": prefill_s, "prefill_tokens_per_s": length / prefill_s,
        "decode_tokens": len(out.token_ids), "decode_s": decode_s,
        "decode_tokens_per_s": len(out.token_ids) / decode_s,
        "decode_eviction_events": len(evictions), "decode_eviction_s": sum(evictions),
        "eviction_share_of_decode": sum(evictions) / decode_s,
        "tokens_stored_max_layer": max(stream.cache.stored_lengths()),
        "kv_bytes_allocated": stream.cache.allocated_bytes(), "kv_bytes_stored": stream.cache.stored_bytes(),
    }
    if dev == "cuda":
        row["peak_gpu_bytes_above_weights"] = torch.cuda.max_memory_allocated() - weights_bytes
    del stream
    return row


def add_ratios(rows: list[dict]) -> None:
    dense = {r["tokens_seen"]: r for r in rows if r["policy"] == "dense"}
    for r in rows:
        d = dense.get(r["tokens_seen"])
        if d is not None:
            r["decode_throughput_vs_dense"] = r["decode_tokens_per_s"] / d["decode_tokens_per_s"]
            r["kv_bytes_vs_dense"] = r["kv_bytes_allocated"] / d["kv_bytes_allocated"]


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    for policy in result["policies"]:
        pts = sorted((r["tokens_seen"], r) for r in rows if r["policy"] == policy)
        if not pts:
            continue
        xs = [x for x, _ in pts]
        a.plot(xs, [r["decode_tokens_per_s"] for _, r in pts], marker="o", label=policy)
        b.plot(xs, [r["kv_bytes_allocated"] / 2**30 for _, r in pts], marker="o", label=policy)
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens seen")
        ax.legend()
    a.set_ylabel("decode tokens/s (batch 1)")
    b.set_ylabel("KV cache GiB per sequence")
    fig.suptitle(f"{result['model']} geometry, random weights, {result['dtype']}, {result['device_name']}, "
                 f"evicting at {result['density']:.0%}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu/paper_scale.json"))
    ap.add_argument("--lengths", type=int, nargs="*", default=[8192, 32768, 65536])
    ap.add_argument("--policies", default="dense,nexus,nexus_reservoir,nexus_paper,snapkv")
    ap.add_argument("--density", type=float, default=0.2)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--warmup-tokens", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--time-limit", type=float, default=240.0, help="start no new cell after this many seconds")
    ap.add_argument("--smoke", action="store_true", help="tiny config on CPU in fp32: checks the script, not speed")
    args = ap.parse_args()
    if args.smoke:
        geometry, args.device, dtype, name = SMOKE, "cpu", torch.float32, "tiny Llama (smoke)"
        args.lengths, args.decode_tokens, args.chunk = [768, 1536], 20, 32
        # nexus_paper's 319 forced tokens do not fit these budgets
        args.policies = "dense,nexus,nexus_reservoir,snapkv"
    elif not torch.cuda.is_available():
        print("paper_scale: no CUDA device; run with --smoke to check the script on CPU", file=sys.stderr)
        return 2
    else:
        geometry, args.device, dtype, name = LLAMA31_8B, "cuda", torch.bfloat16, "Llama-3.1-8B"
    policies = [p for p in args.policies.split(",") if p]
    start = time.perf_counter()
    model = build_model(geometry, args.device, dtype)
    tok = id_tokenizer(geometry["vocab_size"])
    weights_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    build_s = time.perf_counter() - start
    rows, skipped = [], []
    for length in args.lengths:
        for policy in policies:
            if time.perf_counter() - start > args.time_limit:
                skipped.append({"policy": policy, "tokens_seen": length, "why": "time limit"})
                continue
            try:
                rows.append(one_cell(model, tok, policy, length, args, weights_bytes))
                print(json.dumps(rows[-1]), flush=True)
            except torch.cuda.OutOfMemoryError as exc:  # a result at this scale, not a crash of the whole run
                skipped.append({"policy": policy, "tokens_seen": length, "why": f"out of memory: {exc}"[:300]})
                torch.cuda.empty_cache()
    add_ratios(rows)
    result = {
        "benchmark": "benchmarks/paper_scale.py", "command": "python " + " ".join(sys.argv),
        "model": name, "geometry": geometry, "weights": "random (speed does not depend on values)",
        "dtype": str(dtype).replace("torch.", ""), "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (smoke: timings meaningless)",
        "torch": torch.__version__, "python": platform.python_version(),
        "density": args.density, "policies": policies, "chunk": args.chunk, "decode_tokens": args.decode_tokens,
        "weights_bytes": weights_bytes, "model_build_s": build_s, "wall_s": time.perf_counter() - start,
        "paper": PAPER, "rows": rows, "skipped": skipped,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(args.out)
    plot(result, args.out.with_suffix(".png"))
    print(f"paper_scale: {len(rows)} cells, {len(skipped)} skipped, {result['wall_s']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
