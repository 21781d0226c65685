"""`nexus eval kv`: KV-eviction quality and speed suites (mounted on `nexus eval` by nexus/evals/cli.py).

    nexus eval kv --suite fidelity --policies all --budgets 10%,20%,50% --out kv-results
    nexus eval kv --suite longstream --split dev --policies dense,random,snapkv --budgets 20% --out kv-dev
    nexus eval kv report --out kv-results --doc docs/results.md
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from nexus.errors import NexusError

kv_app = typer.Typer(help="KV-eviction suites: how close each policy stays to dense (quality) and what it costs "
                          "(speed, memory).")

QUALITY = ("fidelity", "retrieval", "traces", "longstream")


def _command() -> str:
    return "nexus " + " ".join(sys.argv[1:])


def run_suites(suites: list[str], policies: str = "all", budgets: Optional[str] = None, size: str = "small",
               out: Path = Path("kv-results"), seed: int = 0, model: str = "embedded", device: Optional[str] = None,
               dtype: Optional[str] = None, chunk_size: int = 128, items: Optional[int] = None,
               context_tokens: Optional[int] = None, max_context_tokens: Optional[int] = None,
               traces: Optional[Path] = None, fresh: bool = False, doc: Optional[Path] = None,
               command: str = "", model_pair=None, split: str = "all") -> dict[str, dict]:
    """Run the suites (resuming what `out` already holds) and write summaries, tables, plots and the report."""
    from nexus.evals.kv.config import RunConfig, parse_budgets, parse_policies, size_for
    from nexus.evals.kv.corpus import split_packages
    from nexus.evals.kv.report import write_report
    from nexus.evals.kv.runner import make_suite, run_quality, write_outputs
    from nexus.evals.kv.speed import run_speed
    from nexus.paths import check_out_dir
    from nexus.runtime import REGISTRY, load_model

    if chunk_size < 16:
        raise NexusError(f"--chunk-size must be >= 16, got {chunk_size}.")
    if traces is not None and not traces.exists():
        raise NexusError(f"--traces {traces} does not exist; pass a trajectory.json or a nexus solve output dir.")
    split_packages(split)  # an unknown split fails here, before the model loads
    check_out_dir(out, "--out")
    names = parse_policies(policies, REGISTRY)
    configs = {}
    for suite in suites:
        spec = budgets or ("1024" if suite == "speed" else "10%,20%,50%")
        configs[suite] = RunConfig(
            suite=suite, policies=names, budgets=parse_budgets(spec), size_name=size,
            size=size_for(suite, size, items=items, context_tokens=context_tokens,
                          max_context_tokens=max_context_tokens) if suite != "speed" else size_for(suite, size),
            model=model, device=device, dtype=dtype, seed=seed, chunk_size=chunk_size,
            split="all" if suite == "speed" else split,  # speed has no items: a split means nothing there
        )
    loaded = model_pair or load_model(model, device=device, dtype=dtype)
    summaries = {}
    for suite in suites:
        cfg = configs[suite]
        if suite == "speed":
            run_speed(cfg, *loaded, out, fresh=fresh, command=command)
        else:
            extra = {"trajectories": traces} if suite == "traces" else {}
            run_quality(make_suite(suite, **extra), cfg, *loaded, out, fresh=fresh, command=command)
        summaries[suite] = write_outputs(suite, out, command)
    write_report(out, doc)
    return summaries


@kv_app.callback(invoke_without_command=True)
def kv(
    ctx: typer.Context,
    suite: str = typer.Option("fidelity", help="fidelity | retrieval | traces | longstream | speed | all"),
    policies: str = typer.Option("all", help="Comma list of registered policies, or 'all' (dense always runs)."),
    budgets: Optional[str] = typer.Option(None, help="Densities (10%,20%,50%) or token counts (512,1024). "
                                                     "Default: 10%,20%,50% (speed: 1024 tokens)."),
    size: str = typer.Option("small", help="ci | small | full: item counts and lengths."),
    out: Path = typer.Option(Path("kv-results"), help="Output directory (a rerun resumes what it holds)."),
    seed: int = typer.Option(0, help="Seeds the item generators and the policies' sampling."),
    model: str = typer.Option("embedded", help="embedded, a local model directory or a HF id."),
    device: Optional[str] = typer.Option(None, help="cpu, cuda, cuda:N (default: cuda if available)."),
    dtype: Optional[str] = typer.Option(None, help="float32 | bfloat16 | float16 (default: fp32 CPU, bf16 CUDA)."),
    chunk_size: int = typer.Option(128, help="Prefill chunk (lowered where a small budget needs it)."),
    items: Optional[int] = typer.Option(None, help="Override the size preset's number of items."),
    context_tokens: Optional[int] = typer.Option(None, help="Override the context length (retrieval: shortest)."),
    max_context_tokens: Optional[int] = typer.Option(None, help="Override the longest retrieval haystack."),
    traces: Optional[Path] = typer.Option(None, help="Replay these nexus trajectories instead of recorded ones."),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads."),
    fresh: bool = typer.Option(False, help="Discard what --out holds for these suites and start over."),
    doc: Optional[Path] = typer.Option(None, help="Also write the combined markdown report here."),
    split: str = typer.Option("all", help="Item set: dev | test (disjoint source packages and seeds, for tuning on "
                                          "one and reporting on the other) | all (the historical items). "
                                          "Ignored by speed; not allowed with --traces."),
) -> None:
    """Run KV-eviction suites; results (JSON, markdown, PNG) go under --out."""
    if ctx.invoked_subcommand is not None:
        return
    from nexus.evals.kv.config import SUITES
    from nexus.extras import require_extras

    require_extras("matplotlib")  # the plots come last, after the whole suite ran

    chosen = list(SUITES) if suite == "all" else [suite]
    if any(s not in SUITES for s in chosen):
        raise NexusError(f"Unknown suite {suite!r}; use one of {', '.join(SUITES)} or all.")
    if threads is not None:
        import torch

        if threads < 1:
            raise NexusError(f"--threads must be >= 1, got {threads}.")
        torch.set_num_threads(threads)
    summaries = run_suites(chosen, policies, budgets, size, out, seed, model, device, dtype, chunk_size, items,
                           context_tokens, max_context_tokens, traces, fresh, doc, command=_command(), split=split)
    for name in summaries:
        typer.echo((out / name / "table.md").read_text())
    typer.echo(f"results: {out}/report.md" + (f" and {doc}" if doc else ""))


@kv_app.command("report")
def report(
    out: Path = typer.Option(Path("kv-results"), help="Output directory of earlier runs."),
    doc: Optional[Path] = typer.Option(None, help="Also write the combined markdown here (e.g. docs/results.md)."),
    notes: Optional[Path] = typer.Option(None, help="A markdown file appended after the tables."),
) -> None:
    """Rebuild summaries, tables, plots and the combined report from the records in --out."""
    from nexus.evals.kv.config import SUITES
    from nexus.evals.kv.report import write_report
    from nexus.evals.kv.runner import write_outputs

    found = [s for s in SUITES if (out / s / "run.json").exists()]
    if not found:
        raise NexusError(f"{out} holds no KV-suite results; run `nexus eval kv --suite ... --out {out}` first.")
    if notes is not None and not notes.is_file():
        raise NexusError(f"--notes {notes} is not a file; pass a markdown file or leave it out.")
    for suite in found:
        write_outputs(suite, out)
    typer.echo(write_report(out, doc, notes=notes.read_text(encoding="utf-8") if notes else ""))
