"""PNG plots: quality vs density per policy (quality suites) and memory / speed vs tokens seen (speed suite)."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display here or in CI
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)
    return path


def plot_suite(out_dir: Path, suite: str, summary: dict) -> list[Path]:
    if suite == "speed":
        return plot_speed(out_dir, summary)
    extra = [plot_survival(out_dir, summary)] if summary.get("survival_curves") else []
    return [plot_quality(out_dir, summary), *extra]


def plot_survival(out_dir: Path, summary: dict) -> Path:
    """Longstream: mean fraction of the planted facts' tokens still stored vs eviction events since planting."""
    curves = summary["survival_curves"]
    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, (label, per_policy) in zip(axes[0], curves.items()):
        for n, policy in enumerate(summary["policies"]):
            if policy in per_policy:
                mean = per_policy[policy]["mean"]
                ax.plot(range(1, len(mean) + 1), [100 * v for v in mean], marker=".", label=policy,
                        linestyle="--" if policy == "dense" else "-", color=colors[n % len(colors)])
        ax.set_title(f"budget {label}")
        ax.set_xlabel("eviction events since the fact was planted")
        ax.set_ylabel("fact tokens still stored % (mean over layers, facts)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle("longstream: survival of planted facts")
    return _save(fig, Path(out_dir) / summary["suite"] / "survival_vs_events.png")


def plot_quality(out_dir: Path, summary: dict) -> Path:
    metrics = {m["key"]: m for m in summary["metrics"]}
    keys = [summary["headline"]] + [k for k in ("top1", "em", "same_first_line") if k in metrics]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        m = metrics[key]
        colors = plt.get_cmap("tab20").colors  # 11+ policies: the default cycle has only 10 colours
        for n, policy in enumerate(summary["policies"]):
            pts = []
            for label, cells in summary["cells"].items():
                cell = cells.get(policy)
                if cell and cell["items"]:
                    est = cell["metrics"][key]
                    pts.append((cell["density"], est["mean"] * m["scale"], est["ci95"][0] * m["scale"],
                                est["ci95"][1] * m["scale"]))
            if not pts:
                continue
            pts.sort()
            x, y, lo, hi = zip(*pts)
            ax.errorbar(x, y, yerr=[[a - b for a, b in zip(y, lo)], [b - a for a, b in zip(y, hi)]],
                        marker="o", capsize=3, label=policy, linestyle="--" if policy == "dense" else "-",
                        color=colors[n % len(colors)])
        ax.set_xlabel("cache density (budget / context tokens)")
        ax.set_ylabel(m["label"])
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"{summary['suite']}: quality vs density (95% CI over items)")
    return _save(fig, Path(out_dir) / summary["suite"] / "quality_vs_density.png")


def plot_speed(out_dir: Path, summary: dict) -> list[Path]:
    panels = [("cache_bytes", "KV cache bytes allocated (MiB)", 2**20),
              ("peak_rss_bytes", "process peak RSS (MiB)", 2**20),
              ("decode_tokens_per_s", "decode tokens/s", 1), ("prefill_tokens_per_s", "prefill tokens/s", 1)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (key, label, div) in zip(axes[0], panels):
        for name, info in summary["per_policy"].items():
            rows = [r for r in info["rows"] if r.get(key) is not None]
            ax.plot([r["tokens_seen"] for r in rows], [r[key] / div for r in rows], marker="o", label=name)
        ax.set_xlabel("tokens seen")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    budget = summary["settings"].get("budget")
    fig.suptitle(f"speed and memory vs tokens seen (budget {budget} tokens)")
    return [_save(fig, Path(out_dir) / "speed" / "memory_vs_tokens.png")]
