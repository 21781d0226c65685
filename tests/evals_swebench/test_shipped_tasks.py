"""The shipped task set: enough real instances from enough libraries, well-formed, and built from a recipe that
pins each sdist and describes each bug as a small mutation (never the libraries' source)."""

from __future__ import annotations

import json
import subprocess

from nexus.evals.swebench.recipe import DEFAULT_RECIPE, load_recipe

from .conftest import ROOT, SHIPPED


def test_at_least_24_instances_from_6_libraries(shipped):
    assert len(shipped) >= 24
    assert len({i.repo for i in shipped.values()}) >= 6


def test_every_instance_is_complete(shipped):
    recipe = load_recipe()
    for inst in shipped.values():
        assert inst.FAIL_TO_PASS, inst.instance_id
        assert inst.PASS_TO_PASS, inst.instance_id  # the library's own suite must keep passing
        assert not set(inst.FAIL_TO_PASS) & set(inst.PASS_TO_PASS)
        assert inst.patch.startswith("diff --git ") and inst.test_patch.startswith("diff --git ")
        assert inst.image and inst.log_parser == "parse_log_pytest" and inst.eval_type == "pass_and_fail"
        assert len(inst.base_commit) == 40 and inst.environment_setup_commit == inst.base_commit
        bug = next(b for b in recipe.bugs if recipe.instance_id(b) == inst.instance_id)
        # the hidden regression test is new (added by test_patch), and at least one of its tests is F2P
        assert f"b/{bug.test_path}" in inst.test_patch
        assert any(t.startswith(bug.test_path + "::") for t in inst.FAIL_TO_PASS)
        # gold patch touches only library code, the statement never shows it
        assert bug.test_path not in inst.patch
        for op in bug.ops:
            assert op.find.strip().splitlines()[0].strip() not in inst.problem_statement


def test_recipe_pins_every_sdist_and_no_library_source_is_committed():
    recipe = load_recipe(DEFAULT_RECIPE)
    assert len(recipe.libraries) >= 6
    for lib in recipe.libraries.values():
        assert len(lib.sha256) == 64 and lib.version
    assert {b.library for b in recipe.bugs} == set(recipe.libraries)
    tracked = subprocess.run(["git", "ls-files", "data/tasks"], cwd=ROOT, capture_output=True, text=True).stdout
    assert not [f for f in tracked.split() if f.endswith(".py")], "library source must not be committed"


def test_shipped_rows_use_the_official_encoding():
    for line in SHIPPED.read_text().splitlines():
        row = json.loads(line)
        assert isinstance(row["FAIL_TO_PASS"], str) and isinstance(json.loads(row["FAIL_TO_PASS"]), list)
        assert set(row) >= {"instance_id", "repo", "base_commit", "problem_statement", "hints_text", "patch",
                            "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "version", "environment_setup_commit",
                            "created_at"}


def test_apply_fallbacks_match_swebench():
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS as upstream

    from nexus.evals.swebench.harness import GIT_APPLY_CMDS

    assert GIT_APPLY_CMDS == upstream
