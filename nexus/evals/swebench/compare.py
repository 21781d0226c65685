"""`nexus eval swebench compare DIR...`: one row per run configuration (markdown table + PNG)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from nexus.errors import NexusError
from nexus.evals.swebench.io import write_text_atomic
from nexus.evals.swebench.runner import finished_records


@dataclass
class Row:
    config: str
    policy: str
    protocol: str
    budget: int
    instances: int
    resolved: int | None  # None: not graded yet
    mean_steps: float | None
    peak_cache_bytes: int | None
    mean_tokens_seen: float | None
    mean_active_s: float | None = None
    mean_prefill_tokens: float | None = None  # tokens fed through the model: re-prefills count again


def summarize(run_dir: Path) -> Row:
    cfg_path = run_dir / "run_config.json"
    if not cfg_path.exists():
        raise NexusError(f"{run_dir} is not a run directory (no run_config.json); pass directories written by "
                         "`nexus eval swebench run`.")
    cfg = json.loads(cfg_path.read_text())
    recs = list(finished_records(run_dir).values())
    totals = [r.get("totals") or {} for r in recs]

    def values(key: str) -> list[float]:
        return [t[key] for t in totals if isinstance(t.get(key), (int, float))]

    report = run_dir / "grade" / "run_report.json"
    resolved = json.loads(report.read_text())["resolved_instances"] if report.exists() else None
    steps, peaks, seen = values("steps"), values("peak_cache_bytes"), values("tokens_seen")
    active = values("active_seconds")
    prefill = [p for p in (_prefill_tokens(run_dir, r) for r in recs) if p is not None]
    return Row(
        config=cfg.get("model_name_or_path", run_dir.name),
        policy=cfg["policy"],
        protocol=cfg["protocol"],
        budget=int(cfg["budget"]),
        instances=len(recs),
        resolved=resolved,
        mean_steps=mean(steps) if steps else None,
        peak_cache_bytes=int(max(peaks)) if peaks else None,
        mean_tokens_seen=mean(seen) if seen else None,
        mean_active_s=mean(active) if active else None,
        mean_prefill_tokens=mean(prefill) if prefill else None,
    )


def _prefill_tokens(run_dir: Path, rec: dict) -> int | None:
    """The last step's cumulative `prefill_tokens` from the instance's trajectory (not kept in done.json)."""
    path = run_dir / "trajectories" / rec["prediction"]["instance_id"] / "trajectory.json"
    try:
        steps = json.loads(path.read_text()).get("steps") or []
    except (OSError, ValueError):
        return None
    stats = next((st["stats"] for st in reversed(steps) if st.get("stats")), None) or {}
    value = stats.get("prefill_tokens")
    return int(value) if isinstance(value, (int, float)) else None


def _fmt(v: float | int | None, spec: str = "") -> str:
    return "n/a" if v is None else format(v, spec)


def markdown(rows: list[Row]) -> str:
    head = ("| configuration | policy | protocol | budget | instances | resolved | mean steps | peak cache bytes "
            "| mean tokens seen | mean prefill tokens | mean agent s |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    body = "".join(
        f"| {r.config} | {r.policy} | {r.protocol} | {r.budget} | {r.instances} | "
        f"{'n/a' if r.resolved is None else f'{r.resolved}/{r.instances}'} | {_fmt(r.mean_steps, '.1f')} | "
        f"{_fmt(r.peak_cache_bytes, ',')} | {_fmt(r.mean_tokens_seen, ',.0f')} | "
        f"{_fmt(r.mean_prefill_tokens, ',.0f')} | {_fmt(r.mean_active_s, '.1f')} |\n"
        for r in rows
    )
    return head + body


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # "nexus__<model>__<policy>__b<budget>__<protocol>": the model part tells replays from real generation
    labels = [f"{(r.config.split('__') + ['', ''])[1][:14]}\n{r.policy}/{r.protocol}\nb{r.budget}" for r in rows]
    metrics = [
        ("resolved (%)", [100.0 * (r.resolved or 0) / max(r.instances, 1) for r in rows]),
        ("mean steps", [r.mean_steps or 0 for r in rows]),
        ("peak cache (MiB)", [(r.peak_cache_bytes or 0) / 2**20 for r in rows]),
        ("mean tokens seen", [r.mean_tokens_seen or 0 for r in rows]),
        ("mean prefill tokens", [r.mean_prefill_tokens or 0 for r in rows]),
        ("mean agent seconds", [r.mean_active_s or 0 for r in rows]),
    ]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.8))
    for ax, (title, vals) in zip(axes, metrics):
        ax.bar(range(len(rows)), vals, color="#4C72B0")
        ax.set_title(title)
        if title.startswith("resolved"):
            ax.set_ylim(0, 100)
        ax.set_xticks(range(len(rows)), labels, fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def compare(run_dirs: list[Path], out: Path) -> tuple[Path, Path]:
    rows = sorted((summarize(Path(d)) for d in run_dirs), key=lambda r: (r.protocol, r.policy, r.budget))
    md, png = out.with_suffix(".md"), out.with_suffix(".png")
    write_text_atomic(md, markdown(rows))
    plot(rows, png)
    return md, png
