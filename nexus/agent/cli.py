"""`nexus solve`, `nexus repl`, `nexus inspect` and `nexus demo`. Thin: parse, validate, call the agent, print."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

import typer

from nexus.errors import NexusError


def register(app: typer.Typer) -> None:
    app.command("solve")(solve)
    app.command("repl")(repl)
    app.command("inspect")(inspect)
    app.command("demo")(demo)


def _fail(e: NexusError) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


# The stream options `nexus stream` has, spelled the same in solve, repl and demo (and eval swebench run).
def _budget_opt(default: str):
    return typer.Option(default, "--budget", help="KV budget: tokens per layer (1024) or cache bytes (64MiB).")


def _param_opt():
    return typer.Option([], "--param", "-p", help="Policy parameter KEY=VALUE (repeatable).")


def _device_opt():
    return typer.Option(None, "--device", help="cpu, cuda, cuda:N (default: cuda if available).")


def _dtype_opt():
    return typer.Option(None, "--dtype", help="float32 / bfloat16 / float16 (default: fp32 on CPU, bf16 on CUDA).")


def _preflight(model: str, policy: str, param: list[str], budget: str, chunk_size: int, device: Optional[str],
               dtype: Optional[str], sandbox: str, out: Optional[Path]) -> tuple[dict, int | str]:
    """Everything about the stream, sandbox and output directory a user can get wrong, checked before the model
    loads or anything is written; returns (policy parameters, budget)."""
    from nexus.paths import check_out_dir
    from nexus.runtime.budget import budget_option
    from nexus.runtime.cli import parse_params
    from nexus.runtime.preflight import check_stream_settings
    from nexus.sandbox.factory import check_kind

    params = parse_params(param)
    check_stream_settings(model, policy, params, budget, chunk_size, device, dtype)
    check_kind(sandbox)
    if out is not None:
        check_out_dir(out)
    return params, budget_option(budget)


def _config(protocol: str, max_steps: int, max_tokens: int, max_time: float, command_timeout: float,
            max_new_tokens: int, temperature: float, seed: int, max_obs: int, mode: str = "auto",
            reply_prefix: str = ""):
    from nexus.agent.config import AgentConfig, Limits, reply_prefix_from_cli

    return AgentConfig(
        limits=Limits(max_steps=max_steps, max_generated_tokens=max_tokens, max_wall_seconds=max_time,
                      command_timeout=command_timeout),
        protocol=protocol, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
        max_observation_chars=max_obs, mode=mode, reply_prefix=reply_prefix_from_cli(reply_prefix),
    )


def _summary(outcome, repo_origin: str) -> None:
    from nexus.agent.ui import human_bytes

    t = outcome.trajectory["totals"]
    seen, stored, budget = t.get("tokens_seen"), t.get("tokens_stored"), t.get("budget")
    typer.echo("")
    typer.echo(f"repo          {repo_origin}")
    typer.echo(f"exit status   {outcome.exit_status}" + (f" ({outcome.error})" if outcome.error else ""))
    typer.echo(f"steps         {t['steps']}   generated tokens {t['generated_tokens']}")
    if seen is not None:
        typer.echo(f"tokens        {seen} seen vs {stored} stored (budget {budget})")
        typer.echo(f"peak cache    {human_bytes(t.get('peak_cache_bytes'))} ({t.get('peak_cache_bytes')} bytes)"
                   f"   stream rebuilds {t['stream_rebuilds']}")
    typer.echo(f"patch         {outcome.patch_path} ({t.get('patch_lines') or 0} lines)")
    typer.echo(f"trajectory    {outcome.trajectory_path}")


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _run(spec, repo, out_dir: Path, *, resume: bool, quiet: bool) -> int:
    from nexus.agent.run import run_task
    from nexus.agent.ui import ConsoleUI

    ui = None if quiet else ConsoleUI()
    # `kill PID` ends the task like Ctrl-C: the patch and trajectory are written, --resume can continue it.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        outcome = run_task(spec, repo, out_dir, resume=resume, on_event=ui)
    finally:
        signal.signal(signal.SIGTERM, previous)
        repo.cleanup()
    _summary(outcome, spec.repo)
    return 1 if outcome.exit_status == "error" else 0


def _cache_table(out_dir: Path) -> None:
    """Per step: tokens seen keep growing, tokens stored and cache bytes stay at the budget."""
    from rich.console import Console
    from rich.table import Table

    from nexus.agent.trajectory import load

    traj = load(out_dir)
    table = Table(title="KV cache per step (one stream for the whole task)")
    for col in ("step", "tokens seen", "tokens stored", "budget", "cache bytes", "evictions", "resets"):
        table.add_column(col, justify="right")
    for step in traj["steps"]:
        st = step.get("stats") or {}
        table.add_row(str(step["step"]), str(st.get("tokens_seen")), str(st.get("tokens_stored")),
                      str(st.get("budget")), str(st.get("cache_bytes")), str(st.get("eviction_events")),
                      str(st.get("resets")))
    Console(highlight=False).print(table)


def solve(
    repo: Optional[str] = typer.Option(None, "--repo", help="Path of a git checkout, or a git URL to clone."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Base commit (default HEAD)."),
    issue: Optional[str] = typer.Option(None, "--issue", help="Issue text, a file holding it, or a GitHub issue URL."),
    model: str = typer.Option("embedded", "--model", help="embedded | HF model id/path | scripted:FILE | replay:FILE."),
    policy: str = typer.Option("nexus", "--policy", help="Eviction policy (dense, streaming_llm, nexus, ...)."),
    param: list[str] = _param_opt(),
    budget: str = _budget_opt("1024"),
    chunk_size: int = typer.Option(256, "--chunk-size", help="Prefill chunk size (eviction runs between chunks)."),
    device: Optional[str] = _device_opt(),
    dtype: Optional[str] = _dtype_opt(),
    sandbox: str = typer.Option("auto", "--sandbox", help="auto | docker | local | local-unsafe (local needs bubblewrap; local-unsafe runs unisolated)."),
    image: Optional[str] = typer.Option(None, "--image", help="Docker image (default: the nexus base image)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Output directory (default runs/<time>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the task saved in -o DIR from its last step."),
    protocol: str = typer.Option("stream", "--protocol", help="stream (one cache per task) | reprefill (rebuild each turn)."),
    max_steps: int = typer.Option(30, "--max-steps", help="Stop after this many model turns."),
    max_tokens: int = typer.Option(20_000, "--max-tokens", help="Stop after this many generated tokens in total."),
    max_time: float = typer.Option(1800.0, "--max-time", help="Stop after this many seconds of model + command time."),
    command_timeout: float = typer.Option(60.0, "--command-timeout", help="Kill a command after this many seconds."),
    max_new_tokens: int = typer.Option(384, "--max-new-tokens", help="Tokens per reply at most."),
    max_obs: int = typer.Option(6000, "--max-observation-chars", help="Observations longer than this keep head+tail."),
    temperature: float = typer.Option(0.0, "--temperature"),
    seed: int = typer.Option(0, "--seed"),
    reply_prefix: str = typer.Option("", "--reply-prefix",
                                     help="Start every model reply with this text (\\n = newline), e.g. '```bash\\n'."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only print the summary."),
    trajectory_format: str = typer.Option("nexus", "--trajectory-format",
                                          help="nexus | mini-swe-agent (also writes DIR/<DIR name>.traj.json for "
                                               "mini-swe-agent's inspector and tools)."),
) -> None:
    """Run the agent on one task: writes patch.diff and trajectory.json to the output directory."""
    from nexus.agent.issue import load_issue, text_note
    from nexus.agent.mini_trajectory import check_trajectory_format
    from nexus.agent.repo import open_repo
    from nexus.agent.run import TaskSpec, check_new_out_dir

    try:
        check_trajectory_format(trajectory_format)
        if resume:
            if out is None:
                raise NexusError("--resume needs -o DIR, the output directory of the task to continue.")
            spec = TaskSpec.load(out)
            if repo or issue:
                typer.echo(f"note: --resume continues the task saved in {out}; --repo/--issue are ignored.", err=True)
            source = open_repo(spec.repo, spec.commit)
            raise typer.Exit(_run(spec, source, out, resume=True, quiet=quiet))
        if repo is None:
            raise NexusError("no repository given; pass --repo PATH or --repo GIT_URL.")
        if issue is None:
            raise NexusError("no issue given; pass --issue TEXT, --issue FILE or --issue GITHUB_ISSUE_URL.")
        config = _config(protocol, max_steps, max_tokens, max_time, command_timeout, max_new_tokens, temperature,
                         seed, max_obs, reply_prefix=reply_prefix)
        out_dir = out or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        params, budget_value = _preflight(model, policy, param, budget, chunk_size, device, dtype, sandbox, out_dir)
        issue_text, issue_source = load_issue(issue)
        note = text_note(issue, issue_source)
        if note:
            typer.echo(note, err=True)
        check_new_out_dir(out_dir)
        source = open_repo(repo, commit)  # last: a URL is cloned into a temp dir that _run removes
        spec = TaskSpec(repo=repo, commit=source.commit, issue=issue_text, issue_source=issue_source, model=model,
                        policy=policy, budget=budget_value, chunk_size=chunk_size, sandbox=sandbox, image=image,
                        config=config.as_dict(), trajectory_format=trajectory_format, policy_params=params,
                        device=device, dtype=dtype)
        raise typer.Exit(_run(spec, source, out_dir, resume=False, quiet=quiet))
    except NexusError as e:
        _fail(e)


def inspect(
    traj: Path = typer.Argument(..., help="trajectory.json, a mini-swe-agent .traj.json, or a run's directory."),
    full: bool = typer.Option(False, "--full", help="Show whole replies and observations."),
) -> None:
    """Render a trajectory readably: the task, every step with its action, observation and cache stats."""
    from nexus.agent.inspect import render
    from nexus.agent.mini_trajectory import load_any as load

    try:
        render(load(traj), full=full)
    except NexusError as e:
        _fail(e)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as e:
        # the right `format` field over the wrong contents (a hand-edited or truncated file)
        _fail(NexusError(f"{traj} names a trajectory format but its contents do not have that shape "
                         f"({type(e).__name__}: {str(e)[:80]}); pass a trajectory.json written by nexus or a "
                         "mini-swe-agent .traj.json."))


def demo(
    budget: str = typer.Option("512", "--budget", help="Tight on purpose: the task overflows it within a few steps "
                               "(tokens per layer, or cache bytes such as 32MiB)."),
    chunk_size: int = typer.Option(128, "--chunk-size"),
    max_steps: int = typer.Option(8, "--max-steps"),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    sandbox: str = typer.Option("auto", "--sandbox"),
    policy: str = typer.Option("nexus", "--policy"),
    model: str = typer.Option("embedded", "--model"),
    out: Optional[Path] = typer.Option(None, "-o", "--out"),
) -> None:
    """`nexus solve` on the bundled calculator repository and issue, with the embedded model and a tight budget."""
    from nexus.agent.examples import EXAMPLE_ISSUE, make_example_repo
    from nexus.agent.issue import load_issue
    from nexus.agent.run import TaskSpec, check_new_out_dir
    from nexus.sandbox.factory import can_isolate

    try:
        # The 135M model chats instead of acting unless its reply is started for it: begin each with a bash fence.
        config = _config("stream", max_steps, 20_000, 1800.0, 60.0, max_new_tokens, 0.0, 0, 4000,
                         reply_prefix="```bash\n")
        config.limits.max_format_errors = max_steps  # the demo shows the loop and the cache, not a give-up
        issue_text, source_kind = load_issue(str(EXAMPLE_ISSUE))
        out_dir = out or Path("runs") / ("demo-" + time.strftime("%Y%m%d-%H%M%S"))
        _, budget_value = _preflight(model, policy, [], budget, chunk_size, None, None, sandbox, out_dir)
        check_new_out_dir(out_dir, can_resume=False)
        typer.echo(f"nexus demo: {model} model, policy {policy}, budget {budget} tokens/layer (chunk {chunk_size}),"
                   f" {max_steps} steps at most; output in {out_dir}")
        source = make_example_repo()
        if sandbox == "auto" and model == "embedded" and not can_isolate():
            # Our own example repository and model, so README's `make demo` works on any machine; `solve` and
            # `repl` refuse instead (issue 13). --sandbox local makes the demo refuse too.
            typer.echo("nexus demo: neither docker nor bubblewrap can isolate commands here; the bundled example "
                       "runs as --sandbox local-unsafe (pass --sandbox local to refuse instead).", err=True)
            sandbox = "local-unsafe"
        spec = TaskSpec(repo=str(source.path), commit=source.commit, issue=issue_text, issue_source=source_kind,
                        model=model, policy=policy, budget=budget_value, chunk_size=chunk_size, sandbox=sandbox,
                        config=config.as_dict())
        rc = _run(spec, source, out_dir, resume=False, quiet=False)
        _cache_table(out_dir)
        raise typer.Exit(rc)
    except NexusError as e:
        _fail(e)


def repl(
    repo: Path = typer.Option(Path("."), "--repo", help="Git checkout to work in (copied into the sandbox)."),
    model: str = typer.Option("embedded", "--model"),
    policy: str = typer.Option("nexus", "--policy"),
    param: list[str] = _param_opt(),
    budget: str = _budget_opt("2048"),
    chunk_size: int = typer.Option(256, "--chunk-size"),
    device: Optional[str] = _device_opt(),
    dtype: Optional[str] = _dtype_opt(),
    sandbox: str = typer.Option("auto", "--sandbox"),
    mode: str = typer.Option("confirm", "--mode", help="confirm | yolo | human."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens"),
    reply_prefix: str = typer.Option("", "--reply-prefix",
                                     help="Start every model reply with this text (\\n = newline), e.g. '```bash\\n'."),
    history: Optional[Path] = typer.Option(None, "--history", help="Input history file (default ~/.nexus/repl_history)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Where the session trajectory goes."),
) -> None:
    """An interactive session: type a task, watch the actions, confirm or reject them; /help lists commands."""
    from nexus.agent.config import reply_prefix_from_cli
    from nexus.agent.repl import MODES, Repl, ReplOptions

    try:
        if mode not in MODES:
            raise NexusError(f"unknown mode {mode!r}; use one of: {', '.join(MODES)}.")
        if max_new_tokens < 1:
            raise NexusError("--max-new-tokens must be at least 1.")
        params, budget_value = _preflight(model, policy, param, budget, chunk_size, device, dtype, sandbox, out)
        options = ReplOptions(repo=str(repo), model=model, policy=policy, budget=budget_value, chunk_size=chunk_size,
                              sandbox=sandbox, mode=mode, max_new_tokens=max_new_tokens, history=history, out=out,
                              policy_params=params, device=device, dtype=dtype,
                              reply_prefix=reply_prefix_from_cli(reply_prefix))
        raise typer.Exit(Repl(options).run())
    except NexusError as e:
        _fail(e)
