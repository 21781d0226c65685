"""Ctrl-C that is never lost, for the interactive REPL.

CPython turns SIGINT into KeyboardInterrupt at the next Python instruction. When that instruction belongs to a
garbage-collector callback (a weakref's `remove`, a `__del__`), the exception is printed as "Exception ignored" and
dropped, and the step the user wanted to stop runs on. The handler installed here also records the press; the
waits that can last long (the sandboxes' output pumps wake at least once a second) call `raise_if_pressed()`, so a
dropped interrupt is raised again there. Whoever handles the interrupt calls `clear()`.
Without `install()` (nexus solve, tests, evals) nothing is recorded and the checks cost one Event lookup.
"""

from __future__ import annotations

import signal
import threading

_pressed = threading.Event()


def _on_sigint(signum, frame) -> None:
    _pressed.set()
    raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT here (main thread only). Also undoes an inherited 'ignore SIGINT' (nohup, some runners)."""
    signal.signal(signal.SIGINT, _on_sigint)


def raise_if_pressed() -> None:
    if _pressed.is_set():
        raise KeyboardInterrupt


def clear() -> None:
    _pressed.clear()
