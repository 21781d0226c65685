"""Runs are resumable, refuse foreign output dirs, and write JSON/markdown/PNG atomically (tiny random model)."""

from __future__ import annotations

import json

import pytest

from nexus.errors import NexusError
from nexus.evals.kv.cli import run_suites


def run(tmp_path, tiny, suites, policies, **kw):
    return run_suites(suites, policies=policies, budgets=kw.pop("budgets", "25%"), size="ci", out=tmp_path,
                      model_pair=tiny, command="test", **kw)


@pytest.fixture
def tiny_llama(tokenizer):
    from tests.conftest import tiny_model

    return tiny_model("llama", len(tokenizer), layers=2), tokenizer


def test_fidelity_run_resumes_and_adds_new_cells(tmp_path, tiny_llama):
    first = run(tmp_path, tiny_llama, ["fidelity"], "streaming_llm", items=2)
    records = json.loads((tmp_path / "fidelity" / "records.json").read_text())
    assert {(r["item"], r["policy"]) for r in records} == {(f"fid-00{i}", p) for i in (0, 1)
                                                          for p in ("dense", "streaming_llm")}
    assert first["fidelity"]["sanity"]["dense_max_kl"] == 0.0
    assert first["fidelity"]["cells"]["25%"]["dense"]["metrics"]["top1"]["mean"] == 1.0
    # a second run with one more policy computes only the new cells and keeps the old ones bit for bit
    run(tmp_path, tiny_llama, ["fidelity"], "streaming_llm,random", items=2)
    again = json.loads((tmp_path / "fidelity" / "records.json").read_text())
    assert len(again) == 6
    assert [r for r in again if r["policy"] != "random"] == records
    for name in ("summary.json", "table.md", "quality_vs_density.png", "items.json", "run.json"):
        assert (tmp_path / "fidelity" / name).stat().st_size > 0
    assert "| random |" in (tmp_path / "report.md").read_text()
    assert not list(tmp_path.rglob("*.tmp"))


def test_other_settings_in_the_same_dir_are_refused(tmp_path, tiny_llama):
    run(tmp_path, tiny_llama, ["fidelity"], "streaming_llm", items=1)
    with pytest.raises(NexusError, match="--fresh"):
        run(tmp_path, tiny_llama, ["fidelity"], "streaming_llm", items=1, seed=7)
    run(tmp_path, tiny_llama, ["fidelity"], "streaming_llm", items=1, seed=7, fresh=True)
    assert json.loads((tmp_path / "fidelity" / "run.json").read_text())["seed"] == 7


def test_budget_below_forced_tokens_is_recorded_as_skipped(tmp_path, tiny_llama):
    out = run(tmp_path, tiny_llama, ["fidelity"], "nexus_paper", items=1, budgets="5%")
    cell = out["fidelity"]["cells"]["5%"]["nexus_paper"]
    assert cell["items"] == 0 and cell["skipped"] == 1 and "forced" in cell["skip_reason"]
    assert "skipped" in (tmp_path / "fidelity" / "table.md").read_text()


def test_speed_bytes_flat_for_evicting_policies_linear_for_dense(tmp_path, tiny_llama):
    out = run(tmp_path, tiny_llama, ["speed"], "streaming_llm,nexus", budgets="448")["speed"]
    assert out["sanity"]["dense"]["linear"]
    for name in ("streaming_llm", "nexus"):
        assert out["sanity"][name]["flat"] and out["sanity"][name]["stored_within_budget"], out["sanity"][name]
    rows = out["per_policy"]["dense"]["rows"]
    assert [r["checkpoint"] for r in rows] == [512, 1024, 2048]
    assert rows[-1]["cache_bytes"] > rows[0]["cache_bytes"]
    assert (tmp_path / "speed" / "memory_vs_tokens.png").stat().st_size > 0
