"""The CI-size run on the embedded model: the sanity properties the results table rests on.

- dense judged against itself: KL exactly 0, top-1 agreement / same answer / same first line 100%;
- random eviction is clearly the worst policy at 20% density;
- cache bytes stay flat at the budget for evicting policies and grow linearly with tokens seen for dense.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from nexus.evals.kv.cli import run_suites

pytestmark = pytest.mark.slow


def test_fidelity_dense_exact_random_worst(tmp_path, embedded):
    # random is judged against two policies that use attention per token. Not nexus: with the paper's defaults its
    # forced blocks take 256 of the 410 tokens at 20% of 2K, and on 16 items it is no better than random
    # (docs/results.md); a sanity check must not rest on that.
    out = run_suites(["fidelity"], policies="random,snapkv,nexus_ht", budgets="20%", size="ci", out=tmp_path,
                     model_pair=embedded, command="test")["fidelity"]
    sanity, cells = out["sanity"], out["cells"]["20%"]
    assert sanity["dense_items"] == 3 and sanity["dense_max_kl"] == 0.0 and sanity["dense_min_top1"] == 1.0
    others = ("snapkv", "nexus_ht")
    kl = {name: cell["metrics"]["kl"] for name, cell in cells.items()}
    assert all(cells[n]["items"] == 3 for n in ("random", *others))
    # "clearly worst": the highest mean KL, beyond noise on the paired (same-item) bootstrap, and the lowest top-1
    # agreement. No fixed ratio: the texts come from installed packages, so the margin moves with their versions.
    assert kl["random"]["mean"] > max(kl[n]["mean"] for n in others), kl
    assert kl["random"]["ci95"][0] > 0.05  # far from dense, not a rounding effect
    assert sanity["random_worst"]["20%"]["worst"]
    assert set(others) <= set(sanity["random_worst"]["20%"]["beyond_noise_vs"]), sanity["paired_vs_random"]
    top1 = {name: cell["metrics"]["top1"]["mean"] for name, cell in cells.items()}
    assert top1["random"] < min(top1[n] for n in others), top1


def test_speed_bytes_flat_vs_linear(tmp_path, embedded):
    out = run_suites(["speed"], policies="streaming_llm,nexus", budgets="512", size="ci", out=tmp_path,
                     model_pair=embedded, command="test")["speed"]
    per_token = 30 * 2 * 3 * 64 * 4  # layers * (K, V) * kv heads * head dim * fp32 bytes
    dense = out["per_policy"]["dense"]["rows"]
    assert out["sanity"]["dense"]["linear"] and out["sanity"]["dense"]["bytes_per_token"] == per_token
    assert [r["stored_bytes"] for r in dense] == [r["tokens_seen"] * per_token for r in dense]
    for name in ("streaming_llm", "nexus"):
        rows = out["per_policy"][name]["rows"]
        assert out["sanity"][name]["flat"] and out["sanity"][name]["stored_within_budget"]
        assert max(r["tokens_stored"] for r in rows) <= 512
        assert rows[-1]["cache_bytes"] < dense[-1]["cache_bytes"] / 2


def test_cli_retrieval_and_traces_dense_exact(tmp_path, embedded):
    from nexus.cli import app

    args = ["eval", "kv", "--policies", "streaming_llm,random", "--budgets", "25%", "--size", "ci",
            "--items", "1", "--out", str(tmp_path)]
    for suite in ("retrieval", "traces"):
        result = CliRunner().invoke(app, [*args, "--suite", suite])
        assert result.exit_code == 0, result.output
        summary = json.loads((tmp_path / suite / "summary.json").read_text())
        assert summary["sanity"]["dense_max_kl"] == 0.0
        assert summary["cells"]["25%"]["streaming_llm"]["items"] == 1
    retrieval = json.loads((tmp_path / "retrieval" / "summary.json").read_text())
    assert retrieval["sanity"]["dense_min_same_answer"] == 1.0
    assert retrieval["cells"]["25%"]["dense"]["metrics"]["logprob_gap"] == {"mean": 0.0, "ci95": [0.0, 0.0], "n": 4}
    traces = json.loads((tmp_path / "traces" / "summary.json").read_text())
    assert traces["sanity"]["dense_min_same_first_line"] == 1.0
    assert traces["cells"]["25%"]["dense"]["metrics"]["kl"]["n"] >= 3
    assert (tmp_path / "report.md").read_text().count("### ") == 2
