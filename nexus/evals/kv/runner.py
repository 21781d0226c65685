"""Run a suite over policies x budgets, resumably, with progress bars; then write its summary, table and plots.

Dense is run on every item twice: once as the reference and once as a policy like any other, so the table's
"dense vs dense" row (KL 0, agreement 100%) checks the whole measuring chain rather than assuming it.
Dense does not depend on the budget, so its policy run is done once per item and shown under every budget.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from tqdm.auto import tqdm

from nexus.atomic import write_json_atomic
from nexus.errors import NexusError
from nexus.evals.kv.config import Budget, RunConfig
from nexus.evals.kv.store import SuiteStore
from nexus.evals.kv.suite import Item, QualitySuite
from nexus.runtime import InferenceStream, make_policy

DENSE_BUDGET = "any"
STAT_KEYS = ("tokens_seen", "tokens_stored", "peak_tokens_stored", "peak_cache_bytes", "eviction_events",
             "eviction_seconds", "forward_seconds")


def make_suite(name: str, **kwargs) -> QualitySuite:
    from nexus.evals.kv.fidelity import FidelitySuite
    from nexus.evals.kv.longstream import LongStreamSuite
    from nexus.evals.kv.retrieval import RetrievalSuite
    from nexus.evals.kv.traces import TracesSuite

    suites = {"fidelity": FidelitySuite, "retrieval": RetrievalSuite, "traces": TracesSuite,
              "longstream": LongStreamSuite}
    if name not in suites:
        raise NexusError(f"Unknown quality suite {name!r}; use one of {', '.join(suites)}.")
    return suites[name](**kwargs)


def chunk_for(policy, budget: int, chunk_size: int) -> int:
    """The prefill chunk: the configured one, lowered (to a multiple of 16) where the budget leaves less room
    above the policy's forced tokens; 0 when even 16 does not fit."""
    if not policy.evicts:
        return chunk_size
    room = budget - policy.min_budget()
    if room >= chunk_size:
        return chunk_size
    return (room // 16) * 16 if room >= 16 else 0


def open_items(suite: QualitySuite, store: SuiteStore, cfg: RunConfig, tokenizer) -> list[Item]:
    saved = store.items()
    if saved is not None:
        return [Item(**d) for d in saved]
    items = suite.build_items(cfg.size, tokenizer, cfg.seed, cfg.split)
    store.save_items([asdict(i) for i in items])
    return items


def run_cell(suite: QualitySuite, model, tokenizer, item: Item, name: str, budget_spec: Budget | None,
             cfg: RunConfig, ref) -> dict:
    label = budget_spec.label if budget_spec is not None else DENSE_BUDGET
    # dense keeps everything whatever the budget; it is compared at the smallest budget of the run, so suites that
    # score only points past the budget (traces) score dense on the same points as the tightest policy cell
    spec = budget_spec or min(cfg.budgets, key=lambda b: b.resolve(item.context_tokens))
    budget = spec.resolve(item.context_tokens)
    policy = make_policy(name, **cfg.policy_params.get(name, {}))
    record = {"item": item.id, "policy": name, "budget": label, "budget_tokens": budget,
              "density": budget / item.context_tokens if budget_spec is not None else 1.0, "context_tokens": item.context_tokens}
    chunk = chunk_for(policy, budget, cfg.chunk_size)
    if chunk == 0:
        return {**record, "skipped": f"budget {budget} leaves no room above the policy's {policy.min_budget()} "
                                     "forced tokens"}
    try:
        stream = InferenceStream(model, tokenizer, policy, budget=budget, chunk_size=chunk, seed=cfg.seed)
    except NexusError as exc:
        return {**record, "skipped": str(exc)}
    t0 = time.perf_counter()
    got = suite.observe(stream, item)
    seconds = time.perf_counter() - t0
    stats = stream.stats.as_dict()
    detail = suite.detail(item, got)
    return {**record, "chunk_size": chunk, "seconds": seconds, "metrics": suite.compare(item, budget, ref, got),
            "stats": {k: stats[k] for k in STAT_KEYS}, **({"detail": detail} if detail else {})}


def run_quality(suite: QualitySuite, cfg: RunConfig, model, tokenizer, out_dir: Path, fresh: bool = False,
                command: str = "") -> SuiteStore:
    store = SuiteStore(out_dir, suite.name)
    store.open({**cfg.as_dict(), "command": command}, cfg.fingerprint(), fresh)
    items = open_items(suite, store, cfg, tokenizer)
    cells = [(p, None) if p == "dense" else (p, b) for p in cfg.policies for b in cfg.budgets]
    cells = list(dict.fromkeys(cells))
    total = len(items) * len(cells)
    done = sum(store.has(i.id, p, b.label if b else DENSE_BUDGET) for i in items for p, b in cells)
    bar = tqdm(total=total, initial=done, desc=f"kv {suite.name}", unit="run", dynamic_ncols=True)
    for item in items:
        todo = [(p, b) for p, b in cells if not store.has(item.id, p, b.label if b else DENSE_BUDGET)]
        if not todo:
            continue
        # dense never evicts; its budget only tells suites which points are past the tightest budget (traces)
        tightest = min(b.resolve(item.context_tokens) for b in cfg.budgets)
        ref = suite.observe(InferenceStream(model, tokenizer, make_policy("dense"), budget=tightest,
                                            chunk_size=cfg.chunk_size, seed=cfg.seed), item)
        for name, budget in todo:
            bar.set_postfix_str(f"{item.id} {name} {budget.label if budget else ''}".strip())
            store.add(run_cell(suite, model, tokenizer, item, name, budget, cfg, ref))
            bar.update(1)
        del ref
    bar.close()
    return store


def write_outputs(suite_name: str, out_dir: Path, command: str = "") -> dict:
    """Summary JSON, markdown table and plots for whatever records the suite's directory holds."""
    from nexus.evals.kv import plots, report

    summary = report.summarize_suite(out_dir, suite_name)
    summary["command"] = command or summary.get("command", "")
    write_json_atomic(Path(out_dir) / suite_name / "summary.json", summary)
    report.write_suite_table(out_dir, suite_name, summary)
    plots.plot_suite(out_dir, suite_name, summary)
    return summary
