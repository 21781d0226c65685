"""The `nexus` command. Thin: parse arguments, call a layer, print.

Each layer owns its commands in its own `cli.py` with a `register(app)` function; the only thing a layer adds
to this file is its module name in the tuple in `_register_layers`. Errors a user can cause (NexusError) are printed as one sentence.
"""

from __future__ import annotations

import importlib
import sys

import typer

from nexus.errors import NexusError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="nexus: memory-bounded coding agents.",
                  context_settings={"help_option_names": ["-h", "--help"]})


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"nexus {version('nexus')}")
        raise typer.Exit()


@app.callback()
def _options(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")) -> None:
    pass


def _register_layers() -> None:
    for module in ("nexus.runtime.cli", "nexus.sandbox.cli", "nexus.agent.cli", "nexus.evals.cli",
                   "nexus.serve.cli"):
        importlib.import_module(module).register(app)


_register_layers()


def main() -> None:
    try:
        app()
    except NexusError as exc:
        print(f"nexus: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ModuleNotFoundError as exc:  # an eval command without `nexus[eval]`: say what to install
        from nexus.extras import missing_extra

        if (why := missing_extra(exc)) is None:
            raise
        print(f"nexus: error: {why}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("nexus: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
