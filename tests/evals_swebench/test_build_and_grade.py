"""What must be shown #1 and #2, in docker on a subset of the task set rebuilt from the recipe:
gold resolves, empty does not, a half fix and a fix that breaks a PASS_TO_PASS test are not resolved, and every
verdict equals what swebench's own grading functions say about the same log. The rebuild is byte-identical."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest

from nexus.evals.swebench.grade import GradeConfig, grade
from nexus.evals.swebench.predictions import Prediction, special_predictions
from nexus.evals.swebench.recipe import apply_mutation, load_recipe
from nexus.evals.swebench.repos import worktree_diff

from .conftest import SHIPPED, SUBSET

pytestmark = [pytest.mark.docker, pytest.mark.slow]
OWNER = "nexus-tasks__"


def _variant_patch(repo: Path, tmp: Path, revert: list, mutate: list) -> str:
    """A diff against the base commit that reverts some of the bug's mutations and applies other ones."""
    work = tmp / f"variant-{repo.name}-{len(revert)}-{len(mutate)}"
    shutil.rmtree(work, ignore_errors=True)
    git.Repo.clone_from(repo, work)
    for op in revert:
        apply_mutation(work, op, reverse=True)
    for op in mutate:
        apply_mutation(work, op)
    return worktree_diff(work)


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    result, bcfg = built
    insts = result.instances
    by_id = {i.instance_id: i for i in insts}
    recipe = load_recipe()
    bugs = {b.id: b for b in recipe.bugs}
    tmp = tmp_path_factory.mktemp("grade")
    half = _variant_patch(bcfg.repos / f"{OWNER}inflection-3", tmp, [bugs["inflection-3"].ops[0]], [])
    breaking = _variant_patch(bcfg.repos / f"{OWNER}cachetools-1", tmp, list(bugs["cachetools-1"].ops),
                              list(bugs["cachetools-2"].ops))
    runs = {
        "gold": (insts, special_predictions("gold", insts), False),
        "empty": (insts, special_predictions("empty", insts), True),
        "half": ([by_id[f"{OWNER}inflection-3"]],
                 {f"{OWNER}inflection-3": Prediction(f"{OWNER}inflection-3", "half", half)}, False),
        "breaking": ([by_id[f"{OWNER}cachetools-1"]],
                     {f"{OWNER}cachetools-1": Prediction(f"{OWNER}cachetools-1", "breaking", breaking)}, False),
    }
    out = {}
    for name, (subset, preds, run_empty) in runs.items():
        cfg = GradeConfig(out_dir=tmp / name, repos=bcfg.repos, workers=2, run_empty=run_empty)
        out[name] = (grade(subset, preds, cfg, progress=False), cfg.out_dir, subset)
    return out


def test_rebuild_is_byte_identical_to_the_shipped_rows(built):
    result, cfg = built
    shipped = {json.loads(line)["instance_id"]: line for line in SHIPPED.read_text().splitlines()}
    rebuilt = cfg.out.read_text().splitlines()
    assert len(rebuilt) == len(SUBSET)
    for line in rebuilt:
        assert line == shipped[json.loads(line)["instance_id"]]


def test_gold_resolves_everything(graded):
    report, _, subset = graded["gold"]
    assert report["resolved_instances"] == len(subset) == report["total_instances"]
    assert report["resolved_ids"] == sorted(i.instance_id for i in subset)
    assert report["error_ids"] == [] and report["empty_patch_ids"] == []


def test_empty_patches_resolve_nothing(graded):
    report, _, subset = graded["empty"]
    assert report["resolved_instances"] == 0
    assert report["empty_patch_ids"] == sorted(i.instance_id for i in subset)
    assert report["unresolved_ids"] == sorted(i.instance_id for i in subset)  # run anyway: tests really fail


def test_a_half_fix_is_not_resolved(graded):
    report, out, _ = graded["half"]
    assert report["resolved_instances"] == 0 and report["unresolved_instances"] == 1
    row = json.loads((out / f"{OWNER}inflection-3" / "report.json").read_text())[f"{OWNER}inflection-3"]
    f2p = row["tests_status"]["FAIL_TO_PASS"]
    assert f2p["success"] and f2p["failure"]  # some F2P tests fixed, not all
    assert row["tests_status"]["PASS_TO_PASS"]["failure"] == []


def test_a_fix_that_breaks_a_pass_to_pass_test_is_not_resolved(graded):
    report, out, _ = graded["breaking"]
    assert report["resolved_instances"] == 0
    row = json.loads((out / f"{OWNER}cachetools-1" / "report.json").read_text())[f"{OWNER}cachetools-1"]
    assert row["tests_status"]["FAIL_TO_PASS"]["failure"] == []  # the bug itself is fixed ...
    assert row["tests_status"]["PASS_TO_PASS"]["failure"]  # ... but other tests now fail


def test_verdicts_equal_swebench_grading_on_the_same_logs(graded):
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.constants import ResolvedStatus

    from nexus.evals.swebench.grading import test_spec

    checked = 0
    for report, out, subset in graded.values():
        for inst in subset:
            ours = json.loads((out / inst.instance_id / "report.json").read_text())[inst.instance_id]
            spec = test_spec(inst)
            status, ok = get_logs_eval(spec, str(out / inst.instance_id / "test_output.txt"))
            assert ok
            tests = get_eval_tests_report(status, {"FAIL_TO_PASS": inst.FAIL_TO_PASS,
                                                   "PASS_TO_PASS": inst.PASS_TO_PASS})
            theirs = get_resolution_status(tests) == ResolvedStatus.FULL.value
            assert ours["resolved"] == theirs and ours["tests_status"] == tests
            assert (inst.instance_id in report["resolved_ids"]) == theirs
            checked += 1
    assert checked == 3 + 3 + 1 + 1
