"""`nexus stream FILE`: stream a file into one bounded KV cache with a progress bar, generate, print the stats."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from nexus.errors import NexusError

console = Console(stderr=True)


def parse_params(items: list[str]) -> dict:
    """["n=det", "lam=0.25", "block_size=32", "shared_draws=true"] -> {"n": "det", "lam": 0.25, "block_size": 32,
    "shared_draws": True}."""
    params: dict = {}
    for item in items:
        if "=" not in item:
            raise NexusError(f"Policy parameter {item!r} is not KEY=VALUE (e.g. --param lam=0.5).")
        key, raw = item.split("=", 1)
        value: object = raw
        word = raw.strip().lower()
        if word in ("true", "false"):
            params[key.strip()] = word == "true"
            continue
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        params[key.strip()] = value
    return params


def stats_table(stats: dict, title: str = "stream stats") -> Table:
    table = Table(title=title, show_header=False)
    mib = 2**20
    name = stats["policy"].get("policy")
    dense = name == "dense"  # keeps every token: no budget binds and no eviction mode applies
    rows = [
        ("policy", "dense (keeps every token)" if dense else f"{name} ({stats['policy'].get('mode')})"),
        ("budget (tokens/layer)", "none" if dense else str(stats["budget"])),
        ("tokens seen", str(stats["tokens_seen"])),
        ("tokens stored", f"{stats['tokens_stored']} (peak {stats['peak_tokens_stored']})"),
        ("cache bytes", f"{stats['cache_bytes'] / mib:.2f} MiB (peak {stats['peak_cache_bytes'] / mib:.2f} MiB)"),
        ("eviction events", f"{stats['eviction_events']} ({stats['tokens_evicted']} tokens evicted)"),
        ("prefill / decode tokens", f"{stats['prefill_tokens']} / {stats['decode_tokens']}"),
        ("forward / eviction seconds", f"{stats['forward_seconds']:.2f} / {stats['eviction_seconds']:.2f}"),
    ]
    if stats.get("certificate"):
        rows.append(("certificate", str(stats["certificate"])))
    for key, value in rows:
        table.add_row(key, value)
    return table


def stream_command(
    file: Path = typer.Argument(..., help="Text file to stream into the cache."),
    model: str = typer.Option("embedded", help="'embedded' (SmolLM2-135M-Instruct), a model dir or a HF id."),
    policy: str = typer.Option("nexus", help="Eviction policy name."),
    param: list[str] = typer.Option([], "--param", "-p", help="Policy parameter KEY=VALUE (repeatable)."),
    budget: str = typer.Option("1024", help="Tokens per layer (1024) or cache bytes (64MiB)."),
    chunk_size: int = typer.Option(256, help="Prefill chunk size; eviction runs between chunks."),
    prompt: str = typer.Option("\n\nSummarize the text above in one sentence:", help="Appended after the file."),
    max_new_tokens: int = typer.Option(64, help="Tokens to generate after streaming."),
    temperature: float = typer.Option(0.0, help="0 = greedy."),
    top_p: float = typer.Option(1.0),
    seed: int = typer.Option(0, help="Seeds sampling and reservoir selection."),
    device: str = typer.Option(None, help="cpu, cuda, cuda:N (default: cuda if available)."),
    dtype: str = typer.Option(None, help="float32 / bfloat16 / float16 (default: fp32 on CPU, bf16 on CUDA)."),
) -> None:
    """Stream FILE into one bounded KV cache, then generate; prints the stats table."""
    from nexus.runtime import InferenceStream, load_model, make_policy
    from nexus.runtime.budget import budget_option
    from nexus.runtime.preflight import check_stream_settings

    if max_new_tokens < 1:
        raise NexusError(f"--max-new-tokens must be at least 1, got {max_new_tokens}.")
    if not file.is_file():
        raise NexusError(f"{file} is not a readable file; pass the path of a text file to stream.")
    try:
        text = file.read_text(errors="replace")
    except OSError as exc:
        raise NexusError(f"Could not read {file}: {exc.strerror}.") from exc
    params = parse_params(param)
    check_stream_settings(model, policy, params, budget, chunk_size, device, dtype)  # before the ~11 s load
    pol = make_policy(policy, **params)
    with console.status(f"loading {model} ..."):
        mdl, tok = load_model(model, device=device, dtype=dtype)
    stream = InferenceStream(mdl, tok, pol, budget=budget_option(budget),
                             chunk_size=chunk_size, seed=seed)
    ids = tok.encode(text, add_special_tokens=False)
    columns = (TextColumn("prefill"), BarColumn(), MofNCompleteColumn(), TextColumn("tokens"),
               TextColumn("stored {task.fields[stored]}"), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("prefill", total=len(ids), stored=0)
        for start in range(0, len(ids), chunk_size):
            stream.append(ids[start : start + chunk_size])
            bar.update(task, advance=len(ids[start : start + chunk_size]), stored=stream.stats.tokens_stored)
    stream.append(prompt)
    stream.generate(max_new_tokens, temperature=temperature, top_p=top_p,
                    on_token=lambda piece: print(piece, end="", flush=True))
    print()
    console.print(stats_table(stream.stats.as_dict()))


def register(app: typer.Typer) -> None:
    app.command("stream")(stream_command)
