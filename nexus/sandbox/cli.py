"""`nexus sandbox ...`: build images, run a command in a sandbox, list and garbage-collect containers."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from nexus.errors import NexusError

sandbox_app = typer.Typer(no_args_is_help=True, help="Sandboxes: docker images, one-off commands, cleanup.")


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")


def _fail(e: NexusError) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)  # a user-caused error, as everywhere else (docs/agent.md)


@sandbox_app.command("build-base")
def build_base(
    name: str = typer.Option("nexus-base:bookworm", help="Tag of the image to build."),
    base_image: Optional[str] = typer.Option(None, "--base-image", help="Start from this registry image instead of debootstrap."),
    rebuild: bool = typer.Option(False, help="Build even when a cached image with the same recipe exists."),
    mirror: Optional[str] = typer.Option(None, help="Debian mirror for debootstrap."),
) -> None:
    """Build the base image without a registry (debootstrap + docker import), cached by recipe hash."""
    from nexus.sandbox.images import ensure_base_image

    try:
        typer.echo(ensure_base_image(name, from_image=base_image, rebuild=rebuild, mirror=mirror))
    except NexusError as e:
        _fail(e)


@sandbox_app.command("build-env")
def build_env(
    source: Path = typer.Argument(..., help="Repository directory (copied to /testbed) or a setup script."),
    setup: list[str] = typer.Option([], "--setup", help="A setup command (repeatable), run in /testbed with network."),
    base: str = typer.Option("nexus-base:bookworm", help="Base image."),
) -> None:
    """Build an environment image for a repository (tag nexus-env:<content hash>)."""
    from nexus.sandbox.images import build_env_image

    try:
        typer.echo(build_env_image(base, source, setup))
    except NexusError as e:
        _fail(e)


@sandbox_app.command("run")
def run(
    repo: Path = typer.Argument(..., help="Git checkout to copy into the sandbox."),
    command: str = typer.Argument(..., help="Shell command (run with bash -lc in the work dir)."),
    sandbox: str = typer.Option("auto", "--sandbox", help="auto | docker | local | local-unsafe (local needs bubblewrap; local-unsafe runs unisolated)."),
    image: Optional[str] = typer.Option(None, help="Docker image (default nexus-base:bookworm)."),
    base_commit: Optional[str] = typer.Option(None, help="Commit to check out (default HEAD)."),
    timeout: float = typer.Option(60.0, help="Seconds before the command is killed."),
    show_diff: bool = typer.Option(False, "--diff", help="Print the work tree diff afterwards."),
) -> None:
    """Run one command in a fresh sandbox and print its output."""
    from nexus.sandbox import create_sandbox

    try:
        with create_sandbox(sandbox, repo, base_commit=base_commit, image=image, task_id="cli") as sb:
            res = sb.execute(command, timeout)
            typer.echo(res.output, nl=False)
            if res.timed_out:
                typer.echo(f"[timed out after {timeout:g} s]", err=True)
            if show_diff:
                typer.echo(sb.diff(), nl=False)
    except NexusError as e:
        _fail(e)
    raise typer.Exit(res.returncode)


@sandbox_app.command("ls")
def ls(task: Optional[str] = typer.Option(None, help="Only this task id.")) -> None:
    """List nexus containers (running sandboxes, orphans, image builds)."""
    from nexus.sandbox.gc import list_sandboxes
    from nexus.sandbox.listing import table_lines

    try:
        for line in table_lines(list_sandboxes(task)):
            typer.echo(line)
    except NexusError as e:
        _fail(e)


@sandbox_app.command("gc")
def gc_cmd(
    everything: bool = typer.Option(False, "--all", help="Remove every nexus container, not only orphans."),
    task: Optional[str] = typer.Option(None, help="Only this task id."),
    older_than: Optional[float] = typer.Option(None, help="Only containers older than this many seconds."),
) -> None:
    """Remove orphaned sandboxes: containers and local temp dirs whose owner process is gone."""
    from nexus.sandbox.engine import engine_available
    from nexus.sandbox.gc import gc, gc_local

    removed = gc_local(task=task)  # local sandbox dirs of dead processes
    if engine_available():
        try:
            removed += gc(everything=everything, task=task, older_than_s=older_than)
        except NexusError as e:
            _fail(e)
    else:
        typer.echo("no docker engine answers; only local sandbox dirs were checked", err=True)
    for name in removed:
        typer.echo(name)
    typer.echo(f"removed {len(removed)} sandbox(es)", err=True)
