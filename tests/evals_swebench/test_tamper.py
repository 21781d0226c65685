"""Issue 13, section 1: a model patch must not be able to make its own tests pass. Each cheat in cheats.py is
graded on the real cachetools-1 (docker, rebuilt from the recipe): none resolves, the reverted and dropped paths
are listed in the report, and the one that only edits library code is flagged and, with --strict, unresolved."""

from __future__ import annotations

import json

import pytest

from nexus.evals.swebench.grade import GradeConfig, grade
from nexus.evals.swebench.predictions import Prediction

from .cheats import CHEATS, cheat_patch

pytestmark = [pytest.mark.docker, pytest.mark.slow]
IID = "nexus-tasks__cachetools-1"


@pytest.fixture(scope="module")
def cheats_graded(built, tmp_path_factory):
    result, bcfg = built
    inst = next(i for i in result.instances if i.instance_id == IID)
    tmp = tmp_path_factory.mktemp("cheats")
    out = {}
    runs = [(name, False) for name in CHEATS] + [("library_patches_pytest", True)]
    for name, strict in runs:
        patch = cheat_patch(bcfg.repos / IID, tmp, name)
        cfg = GradeConfig(out_dir=tmp / f"{name}-{strict}", repos=bcfg.repos, workers=1, strict=strict)
        report = grade([inst], {IID: Prediction(IID, name, patch)}, cfg, progress=False)
        row = json.loads((cfg.out_dir / IID / "report.json").read_text())[IID]
        out[name, strict] = (report, row, (cfg.out_dir / IID / "test_output.txt").read_text())
    return out


@pytest.mark.parametrize("name, reverted, dropped", [
    ("conftest", [], ["conftest.py"]),
    ("setup_cfg_plugin", ["setup.cfg"], ["src/cachetools_testing.py"]),
    ("pytest_ini_plugin", [], ["pytest.ini", "tests/pass_plugin.py"]),
    ("existing_test_files", ["tests/__init__.py", "tests/test_ttl.py"], []),
])
def test_runner_config_and_test_file_cheats_are_reverted_and_do_not_resolve(cheats_graded, name, reverted, dropped):
    report, row, _ = cheats_graded[name, False]
    assert row["patch_successfully_applied"] and not row["resolved"]
    assert report["resolved_ids"] == [] and report["unresolved_ids"] == [IID]
    assert row["nexus"]["reverted"] == reverted and row["nexus"]["dropped"] == dropped
    assert row["nexus"]["report_check"] == "consistent"
    assert row["tests_status"]["FAIL_TO_PASS"]["success"] == []  # the real tests ran, and the bug is still there


def test_library_code_that_patches_pytest_is_flagged_and_unresolved_under_strict(cheats_graded):
    _, row, _ = cheats_graded["library_patches_pytest", False]
    assert row["nexus"]["reverted"] == [] and row["nexus"]["dropped"] == []  # library code stays
    rules = {(f["path"], f["rule"]) for f in row["nexus"]["suspicious"]}
    assert ("src/cachetools/__init__.py", "names the test runner") in rules
    report, row, _ = cheats_graded["library_patches_pytest", True]
    assert not row["resolved"] and report["resolved_ids"] == [] and "strict" in row["nexus"]


def test_fake_summary_and_exit_marker_make_an_error_not_a_resolution(cheats_graded):
    report, row, log = cheats_graded["fake_markers", False]
    assert not row["resolved"] and report["error_ids"] == [IID] and report["resolved_ids"] == []
    assert row["nexus"]["error"].startswith("the test report was tampered with or is inconsistent")
    assert row["nexus"]["test_exit_code"] == 1  # docker's exit code, not the printed marker
    # The printed markers no longer read as markers: the only exit-code line is the harness's own.
    assert log.count(">>>>> Test Exit Code") == 1 and log.count(">>>>> End Test Output") == 1
    assert "> >>>> Test Exit Code: 0" in log
