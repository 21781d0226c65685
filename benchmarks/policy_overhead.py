"""Seconds per eviction event per policy, relative to one decode forward, at several cache sizes (embedded model).

For each cache size S the embedded model prefills S + tau tokens once (no eviction), recording the last 32
post-RoPE queries per layer and H2O's accumulated attention. Each policy then scores and selects on every layer at
budget S (select repeated, median taken) and the kept indices are compacted (the same gather layer.keep does). An
event runs every tau decode steps, so the amortized overhead is event / tau / decode-forward. Per-step hooks (H2O's
attention accumulation, nexus_ht's certificate) cost every forward: measured as decode time with the hook on.
Policies that correct attention with a logit bias (nexus, nexus_ht) are timed with one in place (70% of the cache
biased, as nexus_ht's tail), as at every event after their first: nexus then scores with the reference scorer.

Run:  python benchmarks/policy_overhead.py [--sizes 512 1024 2048] [--tau 16] [--repeats 3] [--threads N]
      [--out benchmarks/results]   -> policy_overhead.json + policy_overhead.png
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from nexus import kernels  # noqa: E402
from nexus.runtime import InferenceStream, LayerView, load_model, make_policy  # noqa: E402
from nexus.runtime.cache import LOGIT_BIAS  # noqa: E402
from nexus.runtime.policies.nexus_ht import CertificateHook  # noqa: E402

POLICIES = ["random", "streaming_llm", "h2o", "tova", "snapkv", "pyramidkv", "ada_snapkv", "morphkv", "nexus",
            "nexus_reservoir", "nexus_ht"]
RECORD_WINDOW = 32  # the largest window any default policy reads


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def decode_seconds(stream: InferenceStream, steps: int) -> float:
    """Median seconds of one single-token forward into the current cache."""
    times = []
    for _ in range(steps):
        tok = int(torch.argmax(stream.last_logits))
        t0 = time.perf_counter()
        stream._forward([tok])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tail_biases(stream: InferenceStream, gen: torch.Generator) -> list[torch.Tensor]:
    """Per layer: log(1/pi) > 0 on about 70% of the stored tokens (a sampled tail), 0 on the rest."""
    biases = []
    for layer in stream.cache.layers:
        u = torch.rand(layer.stored, generator=gen)
        biases.append(torch.where(u < 0.7, -torch.log(u.clamp_min(0.05)), 0.0))
    return biases


def set_bias(stream: InferenceStream, biases: list[torch.Tensor] | None) -> None:
    """Put a per-token logit bias on every layer (None: remove it), as a corrected policy's events leave one."""
    for idx, layer in enumerate(stream.cache.layers):
        if biases is None:
            layer.token_state.pop(LOGIT_BIAS, None)
        else:
            layer.token_state[LOGIT_BIAS] = biases[idx]


def event_seconds(policy, stream: InferenceStream, size: int, repeats: int) -> tuple[float, float]:
    """(select seconds, compaction seconds) of one eviction event over all layers at budget `size`."""
    num_layers = len(stream.cache.layers)

    def views():
        for idx, layer in enumerate(stream.cache.layers):
            queries = stream.recorder.queries[idx]
            yield layer, LayerView(
                layer_idx=idx, keys=layer.keys[0], values=layer.values[0], positions=layer.positions,
                queries=queries[:, -policy.window:] if policy.window else queries, num_layers=num_layers,
                budget=policy.layer_budget(idx, num_layers, size), event=0, seed=0, state=dict(layer.token_state))

    kept: list[torch.Tensor] = []

    def select_all():
        kept.clear()
        for _, view in views():
            kept.append(policy.select(view))

    select_s = timed(select_all, repeats)

    def compact_all():
        for (layer, _), keep in zip(views(), kept):
            kernels.compact_kv(layer.keys, layer.values, keep.clamp_min(0))

    return select_s, timed(compact_all, repeats)


def measure(model, tok, size: int, tau: int, repeats: int, policies: list[str], decode_steps: int) -> dict:
    stream = InferenceStream(model, tok, make_policy("h2o"), budget=size + 4 * tau + 512, chunk_size=256)
    stream.recorder.window = RECORD_WINDOW
    gen = torch.Generator().manual_seed(size)
    stream.append(torch.randint(3, len(tok), (size + tau,), generator=gen).tolist())
    h2o_hook = stream.recorder.observer
    stream.recorder.observer = None
    decode_s = decode_seconds(stream, decode_steps)
    stream.recorder.observer = h2o_hook
    h2o_decode_s = decode_seconds(stream, decode_steps)
    # nexus_ht's certificate works every forward on layers with a sampled tail; at its defaults about 70% of a full
    # cache is Poisson-sampled tail (bias log(1/pi) > 0), the rest forced or top slice (bias 0)
    ht = make_policy("nexus_ht")
    set_bias(stream, tail_biases(stream, gen))
    stream.recorder.observer = CertificateHook(stream.cache, ht).observe
    ht_decode_s = decode_seconds(stream, decode_steps)
    stream.recorder.observer = None
    set_bias(stream, None)
    biases = tail_biases(stream, gen)  # the decode steps above grew the cache
    rows = {}
    for name in tqdm(policies, desc=f"cache {size}", leave=False):
        policy = make_policy(name)
        # a corrected policy's every event after the first scores with the bias its earlier events left (nexus:
        # the reference scorer instead of the window kernel), so its events are timed with one in place
        set_bias(stream, biases if policy.requires_logit_bias else None)
        select_s, compact_s = event_seconds(policy, stream, size, repeats)
        set_bias(stream, None)
        event_s = select_s + compact_s
        hook_s = {"h2o": h2o_decode_s - decode_s, "nexus_ht": ht_decode_s - decode_s}.get(name, 0.0)
        rows[name] = {
            "select_s": select_s, "compact_s": compact_s, "event_s": event_s,
            "event_over_decode": event_s / decode_s,
            "amortized_pct": 100 * event_s / tau / decode_s,  # event every tau steps, per decode step
            "hook_per_step_pct": 100 * max(0.0, hook_s) / decode_s,
        }
    return {"size": size, "stored_at_event": size + tau, "decode_s": decode_s, "policies": rows}


def plot(results: list[dict], tau: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    sizes = [r["size"] for r in results]
    for name in results[0]["policies"]:
        ax.plot(sizes, [r["policies"][name]["amortized_pct"] + r["policies"][name]["hook_per_step_pct"]
                        for r in results], marker="o", label=name)
    ax.axhline(10, color="k", ls="--", lw=1, label="10% target")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cache budget (tokens)")
    ax.set_ylabel("overhead per decode step (%)")
    ax.set_title(f"Eviction every {tau} decode steps + per-step hooks, vs one decode forward\n(embedded model, CPU)",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--tau", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-steps", type=int, default=8)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    policies = [p for p in args.policies.split(",") if p]
    for name in policies:
        make_policy(name)  # unknown names fail here, before the model loads
    model, tok = load_model("embedded", device="cpu")
    results = [measure(model, tok, size, args.tau, args.repeats, policies, args.decode_steps)
               for size in tqdm(args.sizes, desc="cache sizes")]
    report = {
        "command": "python benchmarks/policy_overhead.py " + " ".join(sys.argv[1:]),
        "model": "embedded (SmolLM2-135M-Instruct, fp32, CPU)", "tau": args.tau, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "load_avg_1m": os.getloadavg()[0], "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "policy_overhead.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2))
    os.replace(tmp, out)
    plot(results, args.tau, args.out / "policy_overhead.png")
    print(f"{'policy':14s} " + " ".join(f"{'S=' + str(r['size']):>22s}" for r in results))
    for name in policies:
        cells = [r["policies"][name] for r in results]
        print(f"{name:14s} " + " ".join(f"{c['event_s'] * 1e3:8.1f}ms {c['amortized_pct']:5.1f}%+{c['hook_per_step_pct']:4.1f}%"
                                        for c in cells))
    print("decode forward: " + ", ".join(f"S={r['size']}: {r['decode_s'] * 1e3:.1f} ms" for r in results))
    print(f"wrote {out} and {args.out / 'policy_overhead.png'}")


if __name__ == "__main__":
    main()
