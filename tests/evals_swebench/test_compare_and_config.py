"""compare: one row per configuration from run directories (markdown + PNG); run/recipe guard rails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nexus.errors import NexusError
from nexus.evals.swebench.compare import compare
from nexus.evals.swebench.io import write_json_atomic
from nexus.evals.swebench.recipe import Mutation, apply_mutation
from nexus.evals.swebench.runner import DONE, RunConfig, _check_config


def fake_run(root: Path, policy: str, protocol: str, resolved: int | None, steps: list[int],
             peaks: list[int], seen: list[int]) -> Path:
    """A run directory laid out as `eval swebench run` writes it (configuration, done records, grade report)."""
    cfg = RunConfig(out_dir=root / f"{policy}-{protocol}", policy=policy, protocol=protocol, budget=512)
    _check_config(cfg)
    for n, (st, pk, sn) in enumerate(zip(steps, peaks, seen)):
        write_json_atomic(cfg.out_dir / "trajectories" / f"i-{n}" / DONE, {
            "prediction": {"instance_id": f"i-{n}", "model_name_or_path": cfg.model_name, "model_patch": ""},
            "exit_status": "submitted", "error": None,
            "totals": {"steps": st, "peak_cache_bytes": pk, "tokens_seen": sn, "active_seconds": 2.0 * st}})
        write_json_atomic(cfg.out_dir / "trajectories" / f"i-{n}" / "trajectory.json",
                          {"steps": [{"stats": {"prefill_tokens": 3 * sn}}]})
    if resolved is not None:
        write_json_atomic(cfg.out_dir / "grade" / "run_report.json", {"resolved_instances": resolved})
    return cfg.out_dir


def test_compare_writes_a_row_per_configuration(tmp_path):
    a = fake_run(tmp_path, "dense", "stream", 1, [4, 6], [1000, 3000], [800, 1200])
    b = fake_run(tmp_path, "nexus", "reprefill", None, [5], [500], [900])
    md, png = compare([a, b], tmp_path / "cmp")
    text = md.read_text()
    assert "| nexus__embedded__dense__b512__stream | dense | stream | 512 | 2 | 1/2 | 5.0 | 3,000 | 1,000 | 3,000 | 10.0 |" in text
    assert "| nexus | reprefill | 512 | 1 | n/a | 5.0 | 500 | 900 | 2,700 | 10.0 |" in text  # not graded yet: says so
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_compare_rejects_a_directory_that_is_not_a_run(tmp_path):
    with pytest.raises(NexusError, match="not a run directory"):
        compare([tmp_path], tmp_path / "cmp")


def test_a_run_with_another_configuration_is_refused(tmp_path):
    _check_config(RunConfig(out_dir=tmp_path, policy="dense"))
    _check_config(RunConfig(out_dir=tmp_path, policy="dense"))  # same configuration: resumes
    with pytest.raises(NexusError, match="different configuration"):
        _check_config(RunConfig(out_dir=tmp_path, policy="nexus"))
    assert json.loads((tmp_path / "run_config.json").read_text())["policy"] == "dense"


def test_reply_prefix_is_part_of_the_configuration_and_old_run_dirs_still_resume(tmp_path):
    _check_config(RunConfig(out_dir=tmp_path, reply_prefix="```bash\n"))
    with pytest.raises(NexusError, match="reply_prefix"):
        _check_config(RunConfig(out_dir=tmp_path))
    old = tmp_path / "old"
    old.mkdir()
    written = RunConfig(out_dir=old).identity()
    del written["reply_prefix"]  # a run directory from before the option existed
    (old / "run_config.json").write_text(json.dumps(written))
    _check_config(RunConfig(out_dir=old))


def test_a_stale_mutation_is_refused(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    with pytest.raises(NexusError, match="occurs 2 times"):
        apply_mutation(tmp_path, Mutation("m.py", "x = 1", "x = 2"))
    apply_mutation(tmp_path, Mutation("m.py", "x = 1\nx = 1", "x = 1\nx = 2"))
    apply_mutation(tmp_path, Mutation("m.py", "x = 1\nx = 1", "x = 1\nx = 2"), reverse=True)
    assert (tmp_path / "m.py").read_text() == "x = 1\nx = 1\n"


def test_replay_run_points_each_instance_at_its_recorded_trajectory(tmp_path, shipped):
    from nexus.evals.swebench.runner import agent_model

    inst = next(iter(shipped.values()))
    recorded = tmp_path / "recorded"
    cfg = RunConfig(out_dir=tmp_path / "replayed", model=f"replay-run:{recorded}", policy="h2o")
    with pytest.raises(NexusError, match="replay-run: needs a run directory"):
        agent_model(cfg, inst)
    traj = recorded / "trajectories" / inst.instance_id / "trajectory.json"
    traj.parent.mkdir(parents=True)
    traj.write_text("{}")
    assert agent_model(cfg, inst) == f"replay:{traj}"
    assert cfg.model_name == "nexus__replay-recorded__h2o__b1024__stream"
    assert agent_model(RunConfig(out_dir=tmp_path), inst) == "embedded"


def test_a_partial_rebuild_keeps_the_other_rows(tmp_path):
    from nexus.evals.swebench.builder import merge_rows
    from nexus.evals.swebench.recipe import load_recipe

    from .conftest import SHIPPED

    recipe = load_recipe()
    lines = SHIPPED.read_text().splitlines()
    rebuilt = json.loads(lines[3]) | {"hints_text": "rebuilt"}
    merged = merge_rows(recipe, [rebuilt], SHIPPED)
    assert len(merged) == len(lines)
    assert merged[3] == rebuilt and [json.dumps(r, ensure_ascii=False) for r in merged[4:]] == lines[4:]
