"""`nexus eval ...`: evaluation commands. `eval swebench` is the SWE-bench-style harness; other suites add their
own sub-apps to `eval_app`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import typer

from nexus.errors import NexusError

eval_app = typer.Typer(no_args_is_help=True, help="Evaluate agent configurations.")
swebench_app = typer.Typer(no_args_is_help=True,
                           help="SWE-bench-style tasks: build, run, grade, compare, stats, merge-preds.")
eval_app.add_typer(swebench_app, name="swebench")
from nexus.evals.kv.cli import kv_app  # noqa: E402  (KV-eviction suites, nexus/evals/kv)
eval_app.add_typer(kv_app, name="kv")

DEFAULT_INSTANCES = Path(__file__).resolve().parents[2] / "data" / "tasks" / "instances.jsonl"


def _default_repos() -> Path:
    from nexus.evals.swebench.repos import clone_cache

    return clone_cache().parent / "swebench" / "repos"


def _split_ids(ids: Optional[list[str]]) -> list[str]:
    return [i for item in (ids or []) for i in item.split(",") if i.strip()]


def _load(instances: Path, ids: Optional[list[str]]):
    from nexus.evals.swebench.instances import load_instances

    res = load_instances(instances, _split_ids(ids))
    for p in res.problems:
        typer.echo(f"skipped: {p}", err=True)
    if not res.instances:
        raise NexusError(f"No valid instances to evaluate in {instances}; fix the rows reported above.")
    return res.instances


@swebench_app.command("build-tasks")
def build_tasks_cmd(
    recipe: Path = typer.Option(None, help="Task-set recipe (default: data/tasks/recipe.yaml)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Instances .jsonl to write (default: the bundled "
                                       "data/tasks/instances.jsonl; required with --recipe)."),
    repos: Path = typer.Option(None, help="Where the per-instance git repos go (default ~/.cache/nexus/swebench/repos)."),
    only: Optional[list[str]] = typer.Option(None, "--only", help="Build only these bug ids (repeat or comma-separate)."),
    workers: int = typer.Option(2, help="Bugs validated in parallel (each run is a container)."),
    check: bool = typer.Option(False, help="Build to a temp file and fail unless it is byte-identical to --out."),
) -> None:
    """Rebuild the bundled task set: sdists -> git repos -> injected bugs -> validated instances."""
    import tempfile

    from nexus.evals.swebench.recipe import DEFAULT_RECIPE, load_recipe

    if recipe is not None and out is None:
        raise NexusError("--recipe needs --out: without it the build would overwrite the bundled "
                         "data/tasks/instances.jsonl; pass -o YOUR_TASKS.jsonl.")
    out = out or DEFAULT_INSTANCES
    r = load_recipe(recipe or DEFAULT_RECIPE)
    # --check is read-only: instances, repos and logs go to a temp dir, removed afterwards (kept when the check
    # fails, for its logs).
    scratch = Path(tempfile.mkdtemp(prefix="nexus-check-")) if check else None
    try:
        _build_and_check(r, out, scratch, repos, workers, only)
    except BaseException:
        if scratch is not None:
            typer.echo(f"check output and logs kept in {scratch}", err=True)
        raise
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _build_and_check(r, out: Path, scratch: Optional[Path], repos: Optional[Path], workers: int,
                     only: Optional[list[str]]) -> None:
    from nexus.evals.swebench.builder import BuildConfig, build_tasks

    check = scratch is not None
    target = scratch / out.name if check else out
    if check and only and out.exists():
        shutil.copy2(out, target)  # a partial rebuild merges into the rows it replaces, as without --check
    cfg = BuildConfig(out=target, repos=scratch / "repos" if check else (repos or _default_repos()),
                      workers=workers, only=_split_ids(only), logs=scratch / "build-logs" if check else None)
    result = build_tasks(r, cfg)
    for bug, why in result.failures.items():
        typer.echo(f"invalid: {bug}: {why}", err=True)
    libs = len({i.repo for i in result.instances})
    typer.echo(f"{len(result.instances)} valid instances from {libs} libraries -> {target}")
    if check:
        # With --only the scratch file is the bundled rows with the rebuilt ones merged in: the same comparison.
        same = out.exists() and out.read_bytes() == target.read_bytes()
        typer.echo(f"byte-identical to {out}: {same}")
        if not same:
            raise typer.Exit(1)
    if result.failures:
        raise typer.Exit(1)


@swebench_app.command("grade")
def grade_cmd(
    instances: Path = typer.Option(DEFAULT_INSTANCES, help="Instances (.json/.jsonl/.parquet)."),
    predictions: str = typer.Option(..., help="Predictions file, or `gold` / `empty`."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory for logs and reports."),
    ids: Optional[list[str]] = typer.Option(None, "--ids", help="Only these instance ids."),
    repos: Path = typer.Option(None, help="Mirror directory of repositories (default: the build-tasks output)."),
    repo_url: Optional[str] = typer.Option(None, help="Clone URL template, e.g. https://github.com/{repo}.git."),
    workers: int = typer.Option(2, help="Containers graded in parallel."),
    timeout: float = typer.Option(1800, help="Seconds the test command may run."),
    run_empty: bool = typer.Option(False, help="Run the tests for empty patches too (official: not run)."),
    strict: bool = typer.Option(False, help="Grade a patch flagged suspicious (library code reaching for the test "
                                "runner) as unresolved."),
    recipe: Optional[Path] = typer.Option(None, help="Recipe the instances were built from, to build their "
                                          "environment images when missing (default: data/tasks/recipe.yaml)."),
) -> None:
    """Grade predictions: fresh container per instance, apply patch + test_patch, run tests, report."""
    from nexus.evals.swebench.grade import GradeConfig, grade
    from nexus.evals.swebench.grade import errors as grade_errors
    from nexus.evals.swebench.predictions import resolve_predictions
    from nexus.evals.swebench.recipe import load_recipe
    from nexus.paths import check_out_dir

    check_out_dir(out)
    task_recipe = load_recipe(recipe) if recipe is not None else None  # a bad recipe fails before anything runs
    insts = _load(instances, ids)
    preds = resolve_predictions(predictions, insts)
    _check_prediction_ids(preds, instances)
    cfg = GradeConfig(out_dir=out, repos=repos or (None if repo_url else _default_repos()), repo_url=repo_url,
                      workers=workers, timeout_s=timeout, run_empty=run_empty, strict=strict, recipe=task_recipe)
    report = grade(insts, preds, cfg)
    n = report["total_instances"]
    typer.echo(f"resolved {report['resolved_instances']}/{n} "
               f"({100.0 * report['resolved_instances'] / max(n, 1):.1f}%), "
               f"unresolved {report['unresolved_instances']}, empty {report['empty_patch_instances']}, "
               f"errors {report['error_instances']}, suspicious {len(report['suspicious_ids'])} "
               f"-> {out / 'run_report.json'}")
    for iid, why in grade_errors(out, report).items():
        typer.echo(f"error: {iid}: {why}", err=True)
    if report["error_instances"]:
        raise typer.Exit(1)


def _check_prediction_ids(preds: dict, instances: Path) -> None:
    """swebench refuses predictions for instances the dataset does not have; so do we (a typo'd id would
    otherwise just go ungraded)."""
    from nexus.evals.swebench.instances import load_instances

    known = {i.instance_id for i in load_instances(instances, []).instances}
    unknown = sorted(set(preds) - known)
    if unknown:
        shown = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise NexusError(f"{len(unknown)} prediction id(s) are not instances of {instances} ({shown}); fix the ids "
                         "or pass the --instances file they belong to.")


@swebench_app.command("run")
def run_cmd(
    instances: Path = typer.Option(DEFAULT_INSTANCES, help="Instances (.json/.jsonl/.parquet)."),
    out: Path = typer.Option(..., "-o", "--out", help="Run directory (predictions.jsonl, trajectories)."),
    ids: Optional[list[str]] = typer.Option(None, "--ids", help="Only these instance ids."),
    model: str = typer.Option("embedded", help="Model: `embedded`, an HF model dir, scripted:FILE, or "
                              "replay-run:DIR (replay another run's turns under this policy/budget/protocol)."),
    policy: str = typer.Option("nexus", help="Eviction policy (dense, streaming_llm, nexus, ...)."),
    param: list[str] = typer.Option([], "--param", "-p", help="Policy parameter KEY=VALUE (repeatable)."),
    budget: str = typer.Option("1024", help="KV budget: tokens per layer (1024) or cache bytes (64MiB)."),
    device: Optional[str] = typer.Option(None, help="cpu, cuda, cuda:N (default: cuda if available)."),
    dtype: Optional[str] = typer.Option(None, help="float32 / bfloat16 / float16 (default: fp32 on CPU, bf16 on "
                                        "CUDA)."),
    protocol: str = typer.Option("stream", help="Cache protocol: stream | reprefill."),
    max_steps: int = typer.Option(15, help="Agent steps per instance."),
    max_wall: float = typer.Option(900, help="Wall-clock seconds per instance."),
    max_new_tokens: int = typer.Option(384, help="Tokens the model may generate per turn."),
    reply_prefix: str = typer.Option("", "--reply-prefix",
                                     help="Start every model reply with this text (\\n = newline), e.g. '```bash\\n'."),
    workers: int = typer.Option(1, help="Instances in parallel (threads sharing one loaded model; with ray, one per Ray worker process)."),
    executor: str = typer.Option("local", help="local | ray."),
    address: Optional[str] = typer.Option(None, help="Ray address (with --executor ray); default starts a local Ray."),
    repos: Path = typer.Option(None, help="Mirror directory of repositories (default: the build-tasks output)."),
    repo_url: Optional[str] = typer.Option(None, help="Clone URL template, e.g. https://github.com/{repo}.git."),
    grade_after: bool = typer.Option(True, "--grade/--no-grade", help="Grade the predictions when the run ends."),
    trajectory_format: str = typer.Option("nexus", "--trajectory-format",
                                          help="nexus | mini-swe-agent (also writes trajectories/<id>/<id>.traj.json,"
                                               " mini-swe-agent's layout)."),
) -> None:
    """Run the agent on each instance in its own container; resumable (finished instances are skipped)."""
    from nexus.agent.config import reply_prefix_from_cli
    from nexus.agent.mini_trajectory import check_trajectory_format
    from nexus.evals.swebench.runner import RunConfig, run

    check_trajectory_format(trajectory_format)
    if max_new_tokens < 1:
        raise NexusError(f"--max-new-tokens must be at least 1, got {max_new_tokens}.")
    if grade_after:  # grading comes after every instance ran; say now (first: nothing else can fix it) that it would fail
        from nexus.extras import require_extras

        require_extras("swebench")
    params, budget_value = _check_run_settings(out, model, policy, param, budget, protocol, device, dtype, executor)
    insts = _load(instances, ids)
    cfg = RunConfig(out_dir=out, model=model, policy=policy, budget=budget_value, protocol=protocol,
                    max_steps=max_steps, max_wall_s=max_wall, max_new_tokens=max_new_tokens,
                    reply_prefix=reply_prefix_from_cli(reply_prefix), workers=workers, executor=executor, address=address,
                    repos=repos or (None if repo_url else _default_repos()), repo_url=repo_url,
                    trajectory_format=trajectory_format, policy_params=params, device=device, dtype=dtype)
    summary = run(insts, cfg, instances_path=instances, grade_after=grade_after)
    typer.echo(json.dumps(summary, indent=2))


def _check_run_settings(out: Path, model: str, policy: str, param: list[str], budget: str, protocol: str,
                        device: Optional[str], dtype: Optional[str], executor: str) -> tuple[dict, int | str]:
    """What `run` would otherwise report after the model loaded, or per instance: checked before anything runs."""
    from nexus.agent.config import PROTOCOLS
    from nexus.paths import check_out_dir
    from nexus.runtime.budget import budget_option
    from nexus.runtime.cli import parse_params
    from nexus.evals.swebench.runner import RunConfig
    from nexus.runtime.preflight import check_stream_settings

    if protocol not in PROTOCOLS:
        raise NexusError(f"Unknown cache protocol {protocol!r}; use one of: {', '.join(PROTOCOLS)}.")
    params = parse_params(param)
    check_stream_settings(model, policy, params, budget, RunConfig.chunk_size, device, dtype)
    check_out_dir(out)
    if executor == "local":  # every instance runs in a container
        from nexus.sandbox.factory import check_kind

        check_kind("docker")
    return params, budget_option(budget)


@swebench_app.command("compare")
def compare_cmd(
    runs: list[Path] = typer.Argument(..., help="Run directories written by `eval swebench run`."),
    out: Path = typer.Option(Path("swebench-compare"), "-o", "--out", help="Writes OUT.md and OUT.png."),
) -> None:
    """Table (markdown + PNG) of resolved / steps / peak cache bytes / tokens seen per configuration."""
    from nexus.evals.swebench.compare import compare
    from nexus.paths import check_out_dir

    check_out_dir(out.parent)  # OUT.md and OUT.png go there
    md, png = compare(runs, out)
    typer.echo(md.read_text())
    typer.echo(f"-> {md}, {png}")


@swebench_app.command("stats")
def stats_cmd(
    run: Path = typer.Argument(..., help="Directory written by `eval swebench run` or `eval swebench grade`."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts and ids as JSON."),
    ids: bool = typer.Option(True, "--ids/--no-ids", help="List the instance ids of every group."),
) -> None:
    """Counts by agent exit status and by grade verdict, and every error's sentence (like SWE-agent's quick-stats)."""
    from nexus.evals.swebench.stats import format_stats, run_stats

    stats = run_stats(run)
    typer.echo(json.dumps(stats.to_json(), indent=2) if as_json else format_stats(stats, show_ids=ids))


@swebench_app.command("merge-preds")
def merge_preds_cmd(
    inputs: list[Path] = typer.Argument(..., help="Predictions files (.jsonl/.json) or run directories."),
    out: Path = typer.Option(..., "-o", "--out", help="Merged predictions .jsonl to write."),
) -> None:
    """Merge predictions into one .jsonl; identical duplicates are kept once, conflicting ones refused."""
    from nexus.evals.swebench.merge_preds import merge_to

    written, duplicates = merge_to(inputs, out)
    typer.echo(f"{written} predictions from {len(inputs)} inputs ({duplicates} identical duplicates dropped) -> {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
