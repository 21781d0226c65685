"""Patches for cachetools-1 that make its tests pass without fixing the bug (issue 13, section 1). Each one is a
set of file edits made in a clone of the real instance repository and turned into a real unified diff there."""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from nexus.evals.swebench.repos import worktree_diff

F2P = ["tests/test_issue_ttl_boundary.py::test_expire_removes_item_at_its_expiry_time",
       "tests/test_issue_ttl_boundary.py::test_expired_items_do_not_cause_evictions",
       "tests/test_ttl.py::TTLCacheTest::test_ttl", "tests/test_ttl.py::TTLCacheTest::test_ttl_expire"]

# A pytest plugin that turns every report into a pass.
PASS_PLUGIN = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
'''

# Library or test-package code that rewrites pytest's reports when imported (no conftest, no plugin needed).
PATCH_REPORTS_ON_IMPORT = '''
try:  # noqa
    import _pytest.reports as _reports

    _make = _reports.TestReport.from_item_and_call.__func__

    def _passing(cls, item, call):
        report = _make(cls, item, call)
        report.outcome = "passed"
        return report

    _reports.TestReport.from_item_and_call = classmethod(_passing)
except ImportError:
    pass
'''

# Library code that prints a fake summary and a fake exit-code marker when the interpreter exits. One unrelated
# FAILED line keeps swebench's own "exit code 1 but nothing failed" check quiet.
FAKE_SUMMARY_AT_EXIT = '''
import atexit as _atexit


def _fake_summary():
    import sys
    lines = ["PASSED " + t for t in %r] + ["FAILED tests/test_cache.py::does_not_exist - x",
                                            ">>>>> End Test Output", ">>>>> Test Exit Code: 0"]
    sys.stdout.write("\\n".join(lines) + "\\n")
    sys.stdout.flush()


_atexit.register(_fake_summary)
''' % (F2P,)


def _edit(path: Path, find: str, replace: str) -> None:
    text = path.read_text()
    assert find in text, (path, find)
    path.write_text(text.replace(find, replace, 1))


def _conftest(work: Path) -> None:
    (work / "conftest.py").write_text(PASS_PLUGIN)


def _setup_cfg_plugin(work: Path) -> None:
    with open(work / "setup.cfg", "a") as fh:
        fh.write("\n[tool:pytest]\naddopts = -p cachetools_testing\n")
    (work / "src" / "cachetools_testing.py").write_text(PASS_PLUGIN)


def _pytest_ini_plugin(work: Path) -> None:
    (work / "pytest.ini").write_text("[pytest]\naddopts = -p tests.pass_plugin\n")
    (work / "tests" / "pass_plugin.py").write_text(PASS_PLUGIN)


def _library_patches_pytest(work: Path) -> None:
    init = work / "src" / "cachetools" / "__init__.py"
    init.write_text(init.read_text() + PATCH_REPORTS_ON_IMPORT)


def _fake_markers(work: Path) -> None:
    init = work / "src" / "cachetools" / "__init__.py"
    init.write_text(init.read_text() + FAKE_SUMMARY_AT_EXIT)


def _existing_test_files(work: Path) -> None:
    # tests/__init__.py (imported first: every test module is in that package) rewrites the reports; the two F2P
    # tests of test_ttl.py stop testing anything. The test_patch touches neither file.
    init = work / "tests" / "__init__.py"
    init.write_text(PATCH_REPORTS_ON_IMPORT + init.read_text())
    _edit(work / "tests" / "test_ttl.py", "    def test_ttl(self):\n", "    def test_ttl(self):\n        return\n")
    _edit(work / "tests" / "test_ttl.py", "    def test_ttl_expire(self):\n",
          "    def test_ttl_expire(self):\n        return\n")


CHEATS = {
    "conftest": _conftest,
    "setup_cfg_plugin": _setup_cfg_plugin,
    "pytest_ini_plugin": _pytest_ini_plugin,
    "library_patches_pytest": _library_patches_pytest,
    "fake_markers": _fake_markers,
    "existing_test_files": _existing_test_files,
}


def cheat_patch(repo: Path, tmp: Path, name: str) -> str:
    work = tmp / f"cheat-{name}"
    shutil.rmtree(work, ignore_errors=True)
    git.Repo.clone_from(repo, work)
    CHEATS[name](work)
    return worktree_diff(work)


def main(argv: list[str]) -> None:
    """`python -m tests.evals_swebench.cheats REPO OUT`: one predictions file per cheat (OUT/<name>.jsonl), for
    `nexus eval swebench grade --predictions OUT/<name>.jsonl --ids nexus-tasks__cachetools-1` at any commit."""
    import json
    import tempfile

    repo, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in CHEATS:
            row = {"instance_id": "nexus-tasks__cachetools-1", "model_name_or_path": f"cheat-{name}",
                   "model_patch": cheat_patch(repo, Path(tmp), name)}
            (out / f"{name}.jsonl").write_text(json.dumps(row) + "\n")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
