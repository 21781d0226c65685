"""Fixtures: the shipped instances, and a small part of the task set rebuilt for real in docker (once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "tasks" / "instances.jsonl"
# One bug of three different libraries; inflection-3 has two mutations (the half-fix case), cachetools-1's
# P2P covers tests that cachetools-2's mutation breaks (the breaking-patch case).
SUBSET = ["cachetools-1", "inflection-3", "toolz-3"]


@pytest.fixture(scope="session")
def shipped():
    from nexus.evals.swebench.instances import load_instances

    res = load_instances(SHIPPED)
    assert not res.problems, res.problems
    return res.by_id()


@pytest.fixture(scope="session")
def built(docker_ready, tmp_path_factory):
    """SUBSET rebuilt from the recipe: sdists from PyPI, repos, images, F2P/P2P from runs in the image."""
    from nexus.evals.swebench.builder import BuildConfig, build_tasks
    from nexus.evals.swebench.recipe import load_recipe

    root = tmp_path_factory.mktemp("tasks")
    cfg = BuildConfig(out=root / "instances.jsonl", repos=root / "repos", only=SUBSET, workers=2)
    result = build_tasks(load_recipe(), cfg, progress=False)
    assert not result.failures, result.failures
    return result, cfg
