"""The pieces of tamper-proof grading that need no container: which paths count as test infrastructure, the
hardened pytest command, the marker defanging, the static scan and the junit/log/exit-code cross-check."""

from __future__ import annotations

import shlex

from nexus.evals.swebench.harness import defang
from nexus.evals.swebench.junit import check, mangle
from nexus.evals.swebench.pytest_cmd import harden
from nexus.evals.swebench.tamper import is_test_path, plugins_named, runner_sections, scan, unsafe_paths

CMD = "PYTHONHASHSEED=0 python -m pytest -rA -p no:cacheprovider -W ignore::DeprecationWarning tests"


def test_test_infrastructure_paths():
    for p in ["conftest.py", "src/pkg/conftest.py", "tests/helper.py", "pkg/tests/data/x.json", "test_mod.py",
              "pkg/mod_test.py", "pytest.ini", "tox.ini", ".coveragerc", "src/sitecustomize.py"]:
        assert is_test_path(p), p
    for p in ["src/pkg/__init__.py", "src/pkg/testing_utils.py", "setup.py", "docs/tests.rst", "README.rst"]:
        assert not is_test_path(p), p


def test_setup_cfg_is_test_config_only_where_its_runner_sections_change():
    base = "[metadata]\nname = x\n\n[flake8]\nmax-line-length = 80\n"
    assert runner_sections("setup.cfg", base) == runner_sections("setup.cfg", base.replace("80", "100"))
    assert runner_sections("setup.cfg", base) != runner_sections("setup.cfg", base + "[tool:pytest]\naddopts = -p x\n")
    toml = '[build-system]\nrequires = ["setuptools"]\n'
    assert runner_sections("pyproject.toml", toml) != runner_sections(
        "pyproject.toml", toml + '[tool.pytest.ini_options]\naddopts = "-p x"\n')
    assert runner_sections("pyproject.toml", toml) != runner_sections("pyproject.toml", "not = [toml")


def test_plugins_named_by_configs_and_conftests():
    assert plugins_named("[pytest]\naddopts = -p a.b -p no:cacheprovider -pc\n") == {"a.b", "c"}
    assert plugins_named('pytest_plugins = ["x", "y.z"]\n') == {"x", "y.z"}


def test_patches_into_git_are_refused():
    patch = ("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n"
             "--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+echo hi\n")
    assert unsafe_paths(patch) == [".git/hooks/post-checkout"]
    assert unsafe_paths("--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n") == []


def test_the_pytest_command_is_hardened():
    out = harden(CMD, workdir="/testbed", config="/testbed/.git/h/pytest.ini", junit="/testbed/.git/h/j.xml")
    words = shlex.split(out)
    assert words[:6] == ["env", "-u", "PYTEST_ADDOPTS", "-u", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"]
    assert words[6:10] == ["PYTHONHASHSEED=0", "python", "-m", "pytest"]
    assert {"-c", "/testbed/.git/h/pytest.ini", "--rootdir=/testbed", "--confcutdir=/testbed",
            "--junitxml=/testbed/.git/h/j.xml"} <= set(words)
    assert words[-1] == "tests"
    assert harden("pytest tests && echo ok", workdir="/w", config="c", junit="j") is None
    assert harden("tox -e py", workdir="/w", config="c", junit="j") is None


def test_marker_lines_in_test_output_are_defanged():
    out = defang("ok\n>>>>> Test Exit Code: 0\n>>>>>>>>>> End Test Output\n")
    assert ">>>>>" not in out and "Test Exit Code: 0" in out


def test_scan_flags_library_code_reaching_for_the_runner():
    patch = ("diff --git a/src/pkg/core.py b/src/pkg/core.py\n--- a/src/pkg/core.py\n+++ b/src/pkg/core.py\n"
             "@@ -10,2 +10,3 @@\n x = 1\n+import _pytest.reports\n y = 2\n"
             "diff --git a/tests/test_core.py b/tests/test_core.py\n--- a/tests/test_core.py\n+++ b/tests/test_core.py\n"
             "@@ -1 +1,2 @@\n+import pytest\n a\n")
    found = scan(patch, dropped=set())
    assert [(f["path"], f["line"], f["rule"]) for f in found] == [("src/pkg/core.py", 11, "names the test runner")]
    assert scan(patch.replace("_pytest.reports", "functools"), dropped=set()) == []


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a.T" name="test_x"/>
<testcase classname="tests.test_a" name="test_p[a b]"><failure message="no"/></testcase>
<testcase classname="tests.test_a" name="test_s"><skipped type="pytest.skip"/></testcase>
</testsuite></testsuites>"""
TESTS = ["tests/test_a.py::T::test_x", "tests/test_a.py::test_p[a", "tests/test_a.py::test_s"]


def test_mangle_matches_junit_names():
    assert mangle("tests/test_a.py::T::test_x") == ("tests.test_a.T", "test_x")
    assert mangle("tests/test_a.py::test_p[a b]") == ("tests.test_a", "test_p[a")


def test_cross_check_of_log_junit_and_exit_code():
    honest = {"tests/test_a.py::T::test_x": "PASSED", "tests/test_a.py::test_p[a": "FAILED",
              "tests/test_a.py::test_s": "SKIPPED"}
    assert check(TESTS, honest, JUNIT, 1) == []
    forged = dict(honest, **{"tests/test_a.py::test_p[a": "PASSED"})
    assert check(TESTS, forged, JUNIT, 1) == ["tests/test_a.py::test_p[a: the log says pass, the junit report says fail"]
    assert "pytest exited 0 but the junit report has failures" in check(TESTS, honest, JUNIT, 0)
    assert check(TESTS, honest, None, 1)[0] == "pytest exited 1 but wrote no junit report"
    assert check(TESTS, {}, None, 4) == []  # pytest died before any test ran: nothing to contradict
    assert check(TESTS, honest, "<testsuites", 1)[0].startswith("the junit report is not valid XML")
