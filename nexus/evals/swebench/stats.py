"""`nexus eval swebench stats RUN`: what happened in a run at a glance (SWE-agent's quick-stats for our layout).

RUN is a directory written by `eval swebench run` (trajectories/<id>/done.json or error.txt, and grade/ when it
graded) or by `eval swebench grade` (run_report.json, <id>/report.json or error.txt). Instances are grouped by the
agent's exit status and by the grade's verdict, and every error is shown with its one sentence.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nexus.errors import NexusError

# The run report's id lists, in the order they are shown; empty patches and errors are never "unresolved".
VERDICTS = (("resolved", "resolved_ids"), ("unresolved", "unresolved_ids"), ("empty patch", "empty_patch_ids"),
            ("error", "error_ids"), ("not graded", "incomplete_ids"))


@dataclass
class RunStats:
    run: str
    model: str | None = None
    exit_status: dict[str, list[str]] = field(default_factory=dict)  # agent outcome -> instance ids
    grade_dir: str | None = None
    total_instances: int | None = None
    verdicts: dict[str, list[str]] = field(default_factory=dict)  # resolved / unresolved / ... -> ids
    suspicious: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # "agent: <id>" / "grade: <id>" -> one sentence

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _first_line(path: Path) -> str:
    try:
        return (path.read_text().splitlines() or ["no error recorded"])[0]
    except OSError:
        return "no error recorded"


def _agent(run: Path, stats: RunStats) -> None:
    """Per trajectory directory: its done record's exit status, `crashed` (error.txt) or `unfinished`."""
    for d in sorted(p for p in (run / "trajectories").iterdir() if p.is_dir()):
        done = _read_json(d / "done.json")
        if isinstance(done, dict):
            status = done.get("exit_status") or "stopped"  # the runner's name for a run without one
            if done.get("error"):
                stats.errors[f"agent: {d.name}"] = " ".join(str(done["error"]).split())
        elif (d / "error.txt").exists():
            status = "crashed"
            stats.errors[f"agent: {d.name}"] = _first_line(d / "error.txt")
        else:
            status = "unfinished"
        stats.exit_status.setdefault(status, []).append(d.name)
    config = _read_json(run / "run_config.json")
    if isinstance(config, dict):
        stats.model = config.get("model_name_or_path")


def _grade(grade_dir: Path, stats: RunStats) -> None:
    from nexus.evals.swebench.grade import errors

    report = _read_json(grade_dir / "run_report.json")
    if not isinstance(report, dict):
        raise NexusError(f"{grade_dir / 'run_report.json'} is not a run report (unreadable or not a JSON "
                         "object); grade the run again to rewrite it.")
    stats.grade_dir = str(grade_dir)
    stats.total_instances = report.get("total_instances")
    stats.model = stats.model or report.get("model_name_or_path") or None
    stats.verdicts = {name: list(report.get(key, [])) for name, key in VERDICTS}
    stats.suspicious = list(report.get("suspicious_ids", []))
    for iid, why in errors(grade_dir, report).items():
        stats.errors[f"grade: {iid}"] = why


def run_stats(run: Path) -> RunStats:
    """Stats of a run directory, a grade directory, or a run directory that holds its grade in grade/."""
    run = Path(run)
    has_agent = (run / "trajectories").is_dir()
    grade_dir = run if (run / "run_report.json").is_file() else run / "grade"
    has_grade = (grade_dir / "run_report.json").is_file()
    if not has_agent and not has_grade:
        raise NexusError(f"{run} holds neither trajectories/ nor run_report.json; pass a directory written by "
                         "`eval swebench run` or `eval swebench grade`.")
    stats = RunStats(run=str(run))
    if has_agent:
        _agent(run, stats)
    if has_grade:
        _grade(grade_dir, stats)
    return stats


def format_stats(stats: RunStats, *, show_ids: bool = True) -> str:
    lines = [f"{stats.run}" + (f" ({stats.model})" if stats.model else "")]
    width = max((len(k) for k in [*stats.exit_status, *stats.verdicts]), default=0)  # one column for both groups

    def group(title: str, groups: dict[str, list[str]]) -> None:
        lines.append(title)
        for name, ids in groups.items():
            shown = f"  {', '.join(ids)}" if show_ids and ids else ""
            lines.append(f"  {name:<{width}}  {len(ids):>4}{shown}")

    if stats.exit_status:
        n = sum(len(v) for v in stats.exit_status.values())
        group(f"agent exit status ({n} instances):",
              dict(sorted(stats.exit_status.items(), key=lambda kv: (-len(kv[1]), kv[0]))))
    if stats.grade_dir is not None:
        resolved, total = len(stats.verdicts["resolved"]), stats.total_instances or 0
        group(f"grade ({stats.grade_dir}): {resolved}/{total} resolved ({100.0 * resolved / max(total, 1):.1f}%)",
              stats.verdicts)
        if stats.suspicious:
            lines.append(f"  {'suspicious':<{width}}  {len(stats.suspicious):>4}" +
                         (f"  {', '.join(stats.suspicious)}" if show_ids else ""))
    if stats.errors:
        lines.append(f"errors ({len(stats.errors)}):")
        lines += [f"  {where}: {why}" for where, why in stats.errors.items()]
    return "\n".join(lines)
