"""Decode tokens/s and KV-cache bytes vs tokens seen (1K..8K) for dense vs nexus vs streaming_llm on the embedded
model. A thin wrapper over suite 4 of the KV-eviction suites (nexus/evals/kv/speed.py), so both share one
measurement. Writes speed/records.json, summary.json, table.md and memory_vs_tokens.png under --out.

Run:  python benchmarks/stream_decode.py [--out benchmarks/results/stream_decode] [--budget 1024] [--threads N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.evals.kv.cli import run_suites  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/stream_decode"))
    ap.add_argument("--policies", default="dense,nexus,streaming_llm")
    ap.add_argument("--budget", default="1024", help="cache budget in tokens for the evicting policies")
    ap.add_argument("--size", default="small", help="ci (512..2K tokens seen) | small/full (1K..8K)")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--fresh", action="store_true", help="discard earlier results in --out")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    command = "python benchmarks/stream_decode.py " + " ".join(sys.argv[1:])
    summary = run_suites(["speed"], policies=args.policies, budgets=args.budget, size=args.size, out=args.out,
                         model=args.model, device=args.device, chunk_size=256, fresh=args.fresh,
                         command=command)["speed"]
    print((args.out / "speed" / "table.md").read_text())
    bad = [name for name, check in summary["sanity"].items() if not all(v for k, v in check.items()
                                                                        if isinstance(v, bool))]
    if bad:
        print(f"memory check failed for: {', '.join(bad)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
