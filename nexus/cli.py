"""The `nexus` command. Thin: parse arguments, call a layer, print.

Each layer owns its commands in its own `cli.py` with a `register(app)` function; the only thing a layer adds
to this file is one line in `_register_layers`.
"""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="nexus: memory-bounded coding agents.")


def _register_layers() -> None:
    import importlib

    for module in ("nexus.runtime.cli", "nexus.sandbox.cli", "nexus.agent.cli", "nexus.evals.cli"):
        importlib.import_module(module).register(app)


_register_layers()

if __name__ == "__main__":
    app()
