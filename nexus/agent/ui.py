"""Live console output for `solve`, `demo` and the REPL: streamed tokens, actions, observations, a cache line."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def status_line(stats: dict[str, Any] | None, mode: str | None = None) -> str:
    """One line of cache use: stored / budget tokens, tokens seen, cache bytes, evictions."""
    parts = []
    if stats:
        if (stats.get("policy") or {}).get("policy") == "dense":  # keeps every token: no budget binds
            parts.append(f"cache {stats.get('tokens_stored', 0)} stored (dense, no budget)")
        else:
            parts.append(f"cache {stats.get('tokens_stored', 0)}/{stats.get('budget', 0)} stored")
        parts.append(f"{stats.get('tokens_seen', 0)} seen")
        parts.append(human_bytes(stats.get("cache_bytes")))
        parts.append(f"{stats.get('eviction_events', 0)} evictions")
        cert = stats.get("certificate")
        if cert:
            parts.append("cert " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in list(cert.items())[:2]))
    else:
        parts.append("no KV stream (scripted backend)")
    if mode:
        parts.append(f"mode {mode}")
    return "[" + " · ".join(parts) + "]"


class ConsoleUI:
    """An `on_event` hook that prints the loop as it runs."""

    def __init__(self, out: TextIO | None = None, observation_lines: int = 12, color: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.console = Console(file=self.out, highlight=False, force_terminal=color, soft_wrap=True)
        self.observation_lines = observation_lines
        self.mode: str | None = None
        self.last_stats: dict[str, Any] | None = None
        self._mid_line = False

    def _newline(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        c = self.console
        if kind == "generate":
            self._newline()
            c.print(Text(f"── step {data['step']} ", style="bold cyan") + Text("─" * 40, style="cyan"))
        elif kind == "token":
            self.out.write(data["text"])
            self.out.flush()
            self._mid_line = not data["text"].endswith("\n")
        elif kind == "action":
            self._newline()
            c.print(Text("$ ", style="bold green") + Text(data["command"], style="green"))
        elif kind == "observation":
            self._newline()
            lines = data["text"].splitlines()
            shown = lines[: self.observation_lines]
            c.print(Text("\n".join(shown), style="dim"))
            if len(lines) > len(shown):
                c.print(Text(f"  … {len(lines) - len(shown)} more lines (all of it is in the trajectory)", style="dim"))
            self.print_status()
        elif kind == "format_error":
            self._newline()
            c.print(Text(f"format error: {data['error']} (the model is told how to reply)", style="yellow"))
            self.print_status()
        elif kind == "submit":
            self._newline()
            c.print(Text("submitted", style="bold green"))
            self.print_status()
        elif kind == "stats":
            self.last_stats = data.get("stats")  # printed once the step's outcome is shown
        elif kind == "rebuilt":
            self._newline()
            c.print(Text(f"stream rebuilt from the transcript ({data['reason']}, {data['messages']} messages, "
                         f"{data['seconds']:.1f}s)", style="yellow"))
        elif kind == "resume":
            c.print(Text(f"resuming from step {data.get('from_step', 0)}: {data.get('note', '')}", style="yellow"))

    def print_status(self) -> None:
        self._newline()
        self.console.print(Text(status_line(self.last_stats, self.mode), style="magenta"))
