"""`nexus serve` under load: C concurrent clients x T turns of an agent-like conversation, per policy.

Reports turns/s, p50/p95 request latency, rebuilds and the KV bytes the server held at the end, for nexus vs
dense at the same --budget (dense ignores it: its caches grow with every conversation). Each policy gets a fresh
in-process server on a loopback port, on the embedded model. Writes summary.json, table.md and serve_load.png.

Run:  python benchmarks/serve_load.py [--out benchmarks/results/serve_load] [--clients 4] [--turns 6]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from nexus.atomic import write_text_atomic  # noqa: E402
from nexus.runtime import InferenceStream, load_model, make_policy  # noqa: E402
from nexus.serve.background import BackgroundServer  # noqa: E402
from nexus.serve.engine import Engine  # noqa: E402
from nexus.serve.loadgen import run_load  # noqa: E402


def one_policy(model, tok, policy: str, args) -> dict:
    engine = Engine(model, tok, served_model="embedded", max_sessions=args.clients, session_ttl=3600,
                    default_max_tokens=args.max_tokens,
                    make_stream=lambda: InferenceStream(model, tok, make_policy(policy), budget=args.budget,
                                                        chunk_size=args.chunk_size))
    server = BackgroundServer(engine).start()
    try:
        result = run_load(server.base_url, clients=args.clients, turns=args.turns, max_tokens=args.max_tokens,
                          observation_chars=args.observation_chars)
        health = httpx.get(server.root + "/health").json()
    finally:
        server.stop()
    last = max(r["prompt_tokens"] + r["completion_tokens"] for r in result["records"])
    return {"policy": policy, **{k: v for k, v in result.items() if k != "records"},
            "kv_bytes_end": health["cache_bytes"], "kv_bytes_bound": health["cache_bytes_bound"],
            "tokens_per_conversation_end": last, "records": result["records"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_load"))
    ap.add_argument("--policies", default="nexus,dense")
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--chunk-size", type=int, default=128)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--observation-chars", type=int, default=1500)
    args = ap.parse_args()
    model, tok = load_model("embedded", device="cpu")
    t0 = time.time()
    rows = [one_policy(model, tok, p, args) for p in args.policies.split(",")]
    summary = {"command": "python benchmarks/serve_load.py " + " ".join(sys.argv[1:]), "config": vars(args) | {
        "out": str(args.out)}, "seconds": time.time() - t0, "results": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "summary.json", json.dumps(summary, indent=1))
    lines = ["| policy | turns/s | p50 s | p95 s | rebuilds | tokens/conversation at end | KV MiB at end | KV bound MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bound = "none" if r["kv_bytes_bound"] is None else f"{r['kv_bytes_bound'] / 2**20:.1f}"
        lines.append(f"| {r['policy']} | {r['turns_per_second']:.2f} | {r['p50_seconds']:.2f} | "
                     f"{r['p95_seconds']:.2f} | {r['rebuilds']} | {r['tokens_per_conversation_end']} | "
                     f"{r['kv_bytes_end'] / 2**20:.1f} | {bound} |")
    write_text_atomic(args.out / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for r in rows:
        lat = sorted((x["turn"], x["seconds"]) for x in r["records"])
        turns = sorted({t for t, _ in lat})
        ax1.plot(turns, [sum(s for t, s in lat if t == k) / sum(1 for t, _ in lat if t == k) for k in turns],
                 marker="o", label=r["policy"])
    ax1.set(xlabel="turn", ylabel="mean request latency (s)", title=f"{args.clients} concurrent clients")
    ax1.legend()
    ax2.bar([r["policy"] for r in rows], [r["kv_bytes_end"] / 2**20 for r in rows])
    ax2.set(ylabel="KV MiB held at the end", title=f"budget {args.budget} tokens/layer")
    fig.tight_layout()
    fig.savefig(args.out / "serve_load.png", dpi=100)


if __name__ == "__main__":
    main()
