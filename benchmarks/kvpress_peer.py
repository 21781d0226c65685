"""Our baselines beside kvpress's (NVIDIA/kvpress), on the same items, densities and setting.

Setting: kvpress's prefill compression with the question inside the compressed prompt. Each retrieval question
(nexus/evals/kv/retrieval.py: a real code haystack with planted notes, then "Question: ... Answer: <prefix>") is
one prompt; the prompt is prefilled once with full attention and its KV cache is cut to `density` of its length
per layer (kvpress: a press's forward hook after each attention layer; ours: `probe.compress_once`, one eviction
event scored by the prompt's own last queries). Then the answer is scored on the compressed cache:
- answer log-likelihood (teacher forced; the first answer token comes from the dense prefill in both);
- exact match of a greedy answer (first run of digits, at most len(answer)+4 tokens, stop at a newline).
kvpress runs in its own virtualenv (it pins transformers < 5.3; the project's venv has a newer one), built here
on first use: `pip install torch==2.13.0` (the CPU wheel on local disk) first, then kvpress with torch pinned to it.

    python benchmarks/kvpress_peer.py                      # venv if missing, items, both sides, report
    python benchmarks/kvpress_peer.py --items 8 --context-tokens 1024 --densities 0.2,0.5
    python benchmarks/kvpress_peer.py --side report        # rebuild summary.json / table.md from the records

Outputs under --out (benchmarks/results/kvpress_peer): items.json, ours.jsonl, kvpress.jsonl (one record per
question x method x density; a rerun resumes), summary.json and table.md (paired bootstrap over questions).
The kvpress side imports only torch, transformers and kvpress, so this file runs in either venv.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVPRESS_VERSION = "0.5.5"
TORCH_VERSION = "2.13.0"
DEFAULT_VENV = Path.home() / ".cache" / "nexus" / "kvpress-venv"
# our policy name -> kvpress press, with the press's own defaults; ours are set to the same knobs
PAIRS = {"snapkv": "snapkv", "tova": "tova", "streaming_llm": "streaming_llm"}
OUR_PARAMS = {"snapkv": {"window": 64, "kernel": 5, "pooling": "avgpool"},  # SnapKVPress(window_size=64, kernel=5)
              "streaming_llm": {"sinks": 4}}  # StreamingLLMPress(n_sink=4)
PRESSES = ("snapkv", "tova", "streaming_llm", "knorm", "expected_attention")
OURS = ("snapkv", "tova", "streaming_llm", "random", "nexus", "nexus_ht")


def n_kept(length: int, density: float) -> int:
    """kvpress's own count (compute_n_kept: int(k_len * (1 - ratio)), at least 1); both sides keep this many."""
    return max(1, int(length * (1 - (1 - density))))


def first_number(text: str) -> str:
    found = re.search(r"\d+", text)
    return found.group(0) if found else ""


def load_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def key(r: dict) -> tuple:
    return (r["item"], r["task"], r["method"], r["density"])


# --- items (project venv) ----------------------------------------------------------------------------------------
def build_items(args) -> list[dict]:
    from nexus.evals.kv.config import size_for
    from nexus.evals.kv.retrieval import RetrievalSuite
    from transformers import AutoTokenizer

    from nexus.runtime.model_loading import embedded_model_dir

    tok = AutoTokenizer.from_pretrained(str(embedded_model_dir()))
    size = size_for("retrieval", "ci", items=args.items, context_tokens=args.context_tokens,
                    max_context_tokens=args.context_tokens)
    out = []
    for item in RetrievalSuite().build_items(size, tok, args.seed, args.split):
        for q in item.data["questions"]:
            out.append({"item": item.id, "task": q["task"], "prompt": item.data["haystack"] + q["question"],
                        "answer": q["answer"], "answer_ids": q["answer_ids"]})
    return out


# --- our side (project venv) -------------------------------------------------------------------------------------
def run_ours(args, items: list[dict]) -> None:
    import torch

    from nexus.evals.kv.probe import compress_once, fork, predictive_logprobs, token_nll
    from nexus.runtime import load_model, make_policy

    torch.set_num_threads(args.threads)
    model, tok = load_model("embedded", device="cpu", dtype="float32")
    path = args.out / "ours.jsonl"
    done = {key(r) for r in load_jsonl(path)}
    methods = [("dense", 1.0)] + [(p, d) for p in args.ours for d in args.densities]
    for it in items:
        for method, density in methods:
            rec = {"item": it["item"], "task": it["task"], "method": method, "density": density}
            if key(rec) in done:
                continue
            t0 = time.perf_counter()
            budget = n_kept(len(it["prompt"]), density)
            stream = compress_once(model, tok, make_policy(method, **OUR_PARAMS.get(method, {})), it["prompt"],
                                   budget, seed=args.seed)
            stored = stream.stats.tokens_stored
            scored = fork(stream)
            lp = predictive_logprobs(scored, it["answer_ids"])
            loglik = -float(token_nll(lp, it["answer_ids"]).sum())
            del scored
            gen = stream.generate(len(it["answer_ids"]) + 4, stop=["\n"])
            rec.update(budget=budget, stored=stored, prompt_tokens=len(it["prompt"]), loglik=loglik,
                       text=gen.text, em=float(first_number(gen.text) == it["answer"]),
                       seconds=time.perf_counter() - t0)
            with path.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"ours {rec['item']} {rec['task']} {method} {density}: ll {loglik:.2f} em {rec['em']:.0f}",
                  flush=True)


# --- kvpress side (its own venv: torch, transformers, kvpress only) ----------------------------------------------
def make_press(name: str, density: float):
    import kvpress

    ratio = 1 - density
    return {"snapkv": lambda: kvpress.SnapKVPress(compression_ratio=ratio),
            "tova": lambda: kvpress.TOVAPress(compression_ratio=ratio),
            "streaming_llm": lambda: kvpress.StreamingLLMPress(compression_ratio=ratio),
            "knorm": lambda: kvpress.KnormPress(compression_ratio=ratio),
            "expected_attention": lambda: kvpress.ExpectedAttentionPress(compression_ratio=ratio)}[name]()


def run_kvpress(args, items: list[dict]) -> None:
    import copy
    from contextlib import nullcontext

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    path = args.out / "kvpress.jsonl"
    done = {key(r) for r in load_jsonl(path)}
    methods = [("dense", 1.0)] + [(p, d) for p in args.presses for d in args.densities]
    for it in items:
        prompt = torch.tensor([it["prompt"]])
        n = prompt.shape[1]
        answer = it["answer_ids"]
        for method, density in methods:
            rec = {"item": it["item"], "task": it["task"], "method": method, "density": density}
            if key(rec) in done:
                continue
            t0 = time.perf_counter()
            cache = DynamicCache()
            ctx = nullcontext() if method == "dense" else make_press(method, density)(model)
            with torch.inference_mode(), ctx:
                out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            stored = cache.get_seq_length()
            with torch.inference_mode():
                first = torch.log_softmax(out.logits[0, -1].float(), -1)
                logp = [float(first[answer[0]])]
                if len(answer) > 1:  # teacher forced on a copy of the compressed cache, original positions
                    scored = copy.deepcopy(cache)
                    pos = torch.arange(n, n + len(answer) - 1)[None]
                    rest = model(input_ids=torch.tensor([answer[:-1]]), past_key_values=scored,
                                 position_ids=pos, use_cache=True).logits[0].float().log_softmax(-1)
                    logp += [float(rest[i, t]) for i, t in enumerate(answer[1:])]
                    del scored
                ids, text, logits = [], "", out.logits[0, -1]
                for step in range(len(answer) + 4):  # greedy, as the stream's generate (stop at a newline)
                    tok_id = int(logits.argmax())
                    ids.append(tok_id)
                    if tok_id in eos:
                        break
                    text = tok.decode(ids)
                    if "\n" in text:
                        break
                    logits = model(input_ids=torch.tensor([[tok_id]]), past_key_values=cache,
                                   position_ids=torch.tensor([[n + step]]), use_cache=True).logits[0, -1]
            rec.update(budget=n_kept(n, density), stored=stored, prompt_tokens=n, loglik=sum(logp), text=text,
                       em=float(first_number(text) == it["answer"]), seconds=time.perf_counter() - t0)
            with path.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"kvpress {rec['item']} {rec['task']} {method} {density}: ll {rec['loglik']:.2f} "
                  f"em {rec['em']:.0f}", flush=True)


# --- venv --------------------------------------------------------------------------------------------------------
def ensure_venv(venv: Path) -> Path:
    """The kvpress virtualenv (built once): the CPU torch wheel first, then kvpress with torch held to it, so pip
    can neither pull a CUDA build nor touch the project's venv."""
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import kvpress, torch; assert torch.__version__.startswith('%s')" % TORCH_VERSION]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True)
    subprocess.run([*pip, f"kvpress=={KVPRESS_VERSION}", f"torch=={TORCH_VERSION}"], check=True)
    subprocess.run(probe, check=True)
    return py


# --- report (project venv) ---------------------------------------------------------------------------------------
def report(args) -> dict:
    from nexus.evals.kv.metrics import bootstrap_mean

    ours = {key(r): r for r in load_jsonl(args.out / "ours.jsonl")}
    peer = {key(r): r for r in load_jsonl(args.out / "kvpress.jsonl")}
    questions = sorted({(k[0], k[1]) for k in ours} & {(k[0], k[1]) for k in peer})
    est = lambda xs: bootstrap_mean(xs).as_dict()  # noqa: E731
    rows = []

    def cell(side: dict, method: str, density: float) -> dict | None:
        recs = [side.get((i, t, method, density)) for i, t in questions]
        if not questions or any(r is None for r in recs):
            return None
        dense = [side[(i, t, "dense", 1.0)] for i, t in questions]
        return {"loglik": est([r["loglik"] for r in recs]), "em": est([r["em"] for r in recs]),
                "gap": est([r["loglik"] - d["loglik"] for r, d in zip(recs, dense)]),
                "seconds": sum(r["seconds"] for r in recs)}

    for side_name, side, methods in (("ours", ours, ["dense", *args.ours]),
                                     ("kvpress", peer, ["dense", *args.presses])):
        for method in methods:
            for density in ([1.0] if method == "dense" else args.densities):
                c = cell(side, method, density)
                if c:
                    rows.append({"side": side_name, "method": method, "density": density, **c})
    paired = []
    for mine, theirs in [("dense", "dense"), *PAIRS.items()]:
        for density in ([1.0] if mine == "dense" else args.densities):
            a = [ours.get((i, t, mine, density)) for i, t in questions]
            b = [peer.get((i, t, theirs, density)) for i, t in questions]
            if not questions or any(r is None for r in a + b):
                continue
            d_ll = est([x["loglik"] - y["loglik"] for x, y in zip(a, b)])
            d_em = est([x["em"] - y["em"] for x, y in zip(a, b)])
            same = est([float(first_number(x["text"]) == first_number(y["text"])) for x, y in zip(a, b)])
            agree = d_ll["ci95"][0] <= 0 <= d_ll["ci95"][1] and d_em["ci95"][0] <= 0 <= d_em["ci95"][1]
            paired.append({"ours": mine, "kvpress": theirs, "density": density, "loglik_diff": d_ll,
                           "em_diff": d_em, "same_answer": same, "within_noise": agree,
                           "max_abs_loglik_diff": max(abs(x["loglik"] - y["loglik"]) for x, y in zip(a, b))})
    summary = {"setting": "kvpress prefill compression, question inside the compressed prompt",
               "items": len({q[0] for q in questions}), "questions": len(questions),
               "densities": args.densities, "rows": rows, "paired": paired,
               "kvpress_version": KVPRESS_VERSION, "command": " ".join(sys.argv)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "table.md").write_text(table(summary))
    print(table(summary))
    return summary


def fmt(d: dict, scale: float = 1.0, digits: int = 2) -> str:
    lo, hi = d["ci95"]
    return f"{d['mean'] * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"


def table(s: dict) -> str:
    lines = [f"{s['items']} items, {s['questions']} questions; mean [95% bootstrap CI over questions].", "",
             "| side | method | density | exact match % | answer log-lik (nats) | gap vs own dense (nats) | seconds |",
             "|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        lines.append(f"| {r['side']} | {r['method']} | {r['density']:.0%} | {fmt(r['em'], 100, 1)} | "
                     f"{fmt(r['loglik'])} | {fmt(r['gap'])} | {r['seconds']:.0f} |")
    lines += ["", "Paired, same questions: ours - kvpress (95% bootstrap CI); 'within noise' = both intervals hold 0.",
              "", "| ours | kvpress | density | log-lik diff (nats) | EM diff (points) | same answer % | max abs "
              "log-lik diff | within noise |", "|---|---|---|---|---|---|---|---|"]
    for p in s["paired"]:
        lines.append(f"| {p['ours']} | {p['kvpress']} | {p['density']:.0%} | {fmt(p['loglik_diff'])} | "
                     f"{fmt(p['em_diff'], 100, 1)} | {fmt(p['same_answer'], 100, 1)} | "
                     f"{p['max_abs_loglik_diff']:.3f} | {'yes' if p['within_noise'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", default="all", choices=("all", "items", "ours", "kvpress", "report"))
    ap.add_argument("--items", type=int, default=6)
    ap.add_argument("--context-tokens", type=int, default=1024)
    ap.add_argument("--densities", default="0.2,0.5")
    ap.add_argument("--ours", default=",".join(OURS))
    ap.add_argument("--presses", default=",".join(PRESSES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default="all")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "kvpress_peer")
    args = ap.parse_args(argv)
    args.densities = [float(x) for x in args.densities.split(",") if x]
    args.ours = [x for x in args.ours.split(",") if x]
    args.presses = [x for x in args.presses.split(",") if x]
    args.out.mkdir(parents=True, exist_ok=True)
    items_path = args.out / "items.json"
    if args.side in ("all", "items") or not items_path.exists():
        if not items_path.exists():
            items_path.write_text(json.dumps(build_items(args)) + "\n")
    items = json.loads(items_path.read_text())
    if args.side == "ours":
        run_ours(args, items)
    elif args.side == "kvpress":
        run_kvpress(args, items)
    elif args.side == "report":
        report(args)
    elif args.side == "all":
        from nexus.runtime.model_loading import embedded_model_dir

        t0 = time.time()
        py = ensure_venv(args.venv)
        common = ["--items", str(args.items), "--context-tokens", str(args.context_tokens), "--densities",
                  ",".join(map(str, args.densities)), "--seed", str(args.seed), "--split", args.split,
                  "--threads", str(args.threads), "--out", str(args.out)]
        env = {**os.environ, "PYTHONPATH": ""}  # the kvpress venv must not see the project's packages
        peer = subprocess.Popen([str(py), __file__, "--side", "kvpress", "--presses", ",".join(args.presses),
                                 "--model-dir", str(embedded_model_dir()), *common], env=env)
        run_ours(args, items)
        if peer.wait() != 0:
            raise SystemExit(f"the kvpress side failed (exit {peer.returncode})")
        summary = report(args)
        summary["wall_seconds"] = time.time() - t0
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wall {summary['wall_seconds']:.0f}s")


if __name__ == "__main__":
    main()
