"""`nexus inspect TRAJ`: a trajectory rendered for a human: task, runs, then each step with its cache numbers."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from nexus.agent.ui import human_bytes, status_line


def _clip(text: str | None, full: bool, lines: int = 10) -> str:
    if text is None:
        return ""
    if full:
        return text
    rows = text.splitlines()
    if len(rows) <= lines:
        return text
    return "\n".join(rows[: lines // 2] + [f"… ({len(rows) - lines} lines hidden; --full shows all)"] + rows[-lines // 2 :])


def render(traj: dict[str, Any], full: bool = False, console: Console | None = None) -> None:
    c = console or Console(highlight=False)
    task = traj.get("task", {})
    head = Table.grid(padding=(0, 2))
    for key in ("repo", "commit", "model", "policy", "budget", "sandbox", "issue_source"):
        if task.get(key) is not None:  # a mini-swe-agent trajectory has no repo, policy, budget or sandbox
            head.add_row(Text(key, style="bold"), Text(str(task.get(key))))
    t = traj.get("totals", {})
    head.add_row(Text("exit status", style="bold"), Text(f"{traj.get('exit_status')}" +
                                                        (f" ({traj['error']})" if traj.get("error") else "")))
    if traj.get("config", {}).get("protocol") is not None:
        head.add_row(Text("protocol", style="bold"), Text(str(traj["config"]["protocol"])))
    if t.get("generated_tokens") is None:  # converted from mini-swe-agent: it counts calls and cost instead
        head.add_row(Text("steps", style="bold"), Text(f"{t.get('steps')}  ({t.get('api_calls')} model calls, "
                                                       f"cost {t.get('instance_cost')})"))
    else:
        head.add_row(Text("steps", style="bold"), Text(f"{t.get('steps')}  ({t.get('generated_tokens')} tokens "
                                                       f"generated, {t.get('active_seconds')} s active)"))
    if t.get("tokens_seen") is not None:
        head.add_row(Text("cache", style="bold"), Text(f"{t.get('tokens_seen')} seen vs {t.get('tokens_stored')} stored "
                                                       f"(budget {t.get('budget')}), peak {human_bytes(t.get('peak_cache_bytes'))},"
                                                       f" {t.get('stream_rebuilds')} rebuilds"))
    c.print(Panel(head, title=f"{traj.get('converted_from') or 'nexus'} trajectory", expand=False))
    c.print(Panel(Text(_clip(task.get("issue"), full, 8)), title="issue", expand=False))
    for run in traj.get("runs", []):
        c.print(Text(f"run started {run.get('started')} sandbox={run.get('sandbox')} backend={run.get('backend')}"
                     + (f" resumed from step {run.get('from_step')}" if run.get("resumed") else ""), style="yellow"))
    events = {e.get("step"): e for e in traj.get("events", []) if e.get("event") == "stream_rebuilt"}
    for step in traj.get("steps", []):
        n = step.get("step")
        timing = ("" if step.get("generated_tokens") is None else  # mini-swe-agent records neither
                  f", {step.get('generated_tokens')} tokens, generate {step.get('generate_s')} s, "
                  f"execute {step.get('execute_s', 0)} s")
        c.print(Text(f"── step {n} ({step.get('source')}{timing}) ", style="bold cyan"))
        if n in events:
            e = events[n]
            c.print(Text(f"   stream rebuilt from the transcript: {e['reason']} ({e['messages']} messages, {e['seconds']} s)",
                         style="yellow"))
        c.print(Text(_clip(step.get("response"), full, 8)))
        if step.get("format_error"):
            c.print(Text(f"format error: {step['format_error']}", style="yellow"))
        elif step.get("action") == "submit":
            c.print(Text("submit", style="bold green"))
        elif step.get("action"):
            c.print(Text("$ " + step["action"], style="green"))
            if step.get("rejected"):
                c.print(Text(f"rejected by the user: {step.get('comment') or '(no comment)'}", style="yellow"))
            else:
                c.print(Text(_clip(step.get("observation"), full), style="dim"))
        if "stats" in step:  # steps converted from mini-swe-agent have no cache to report
            c.print(Text(status_line(step.get("stats")), style="magenta"))
    patch = traj.get("patch") or ""
    c.print(Panel(Text(_clip(patch, full, 30) or "(empty patch)"), title="patch", expand=False))
