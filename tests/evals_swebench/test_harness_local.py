"""The eval steps (patch fallbacks, test-file reset, test_patch, markers) on the local sandbox with a real git repo
and real tests, graded by swebench (here with its unittest-style parser): no docker needed, so this runs
everywhere. The system python3 runs the tests: the sandbox user cannot read a venv under /root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nexus.evals.swebench.grading import report_for_log
from nexus.evals.swebench.harness import run_eval
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.predictions import Prediction
from tests.conftest import LOCAL

SRC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
OLD_TEST = ("import unittest\n\nfrom calc import mul\n\n\nclass MulTest(unittest.TestCase):\n"
            "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n")
TEST_PATCH = """diff --git a/test_add.py b/test_add.py
new file mode 100644
--- /dev/null
+++ b/test_add.py
@@ -0,0 +1,8 @@
+import unittest
+
+from calc import add
+
+
+class AddTest(unittest.TestCase):
+    def test_add(self):
+        self.assertEqual(add(2, 3), 5)
"""
ADD, MUL = "test_add (test_add.AddTest.test_add)", "test_mul (test_mul.MulTest.test_mul)"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def calc(tmp_path):
    repo = tmp_path / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text(SRC)
    (repo / "test_mul.py").write_text(OLD_TEST)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "calc")
    sha = git(repo, "rev-parse", "HEAD")
    gold = diff_for(repo, SRC.replace("return a - b", "return a + b"))
    inst = Instance(instance_id="local__calc-1", repo="local/calc", base_commit=sha, problem_statement="add subtracts",
                    patch=gold, FAIL_TO_PASS=[ADD], PASS_TO_PASS=[MUL], test_patch=TEST_PATCH,
                    log_parser="parse_log_django", eval_type="pass_and_fail",
                    test_cmd="/usr/bin/python3 -B -m unittest -v test_mul test_add")
    return repo, inst


def diff_for(repo: Path, calc_py: str) -> str:
    """The patch (against HEAD) that turns calc.py into `calc_py`."""
    (repo / "calc.py").write_text(calc_py)
    patch = git(repo, "diff") + "\n"
    git(repo, "checkout", "-q", "--", ".")
    return patch


def fuzzy(gold: str) -> str:
    """The same fix whose context says `def add(x, y)`: git apply (all three ways) refuses it, `patch --fuzz`
    takes it."""
    return gold.replace(" def add(a, b):", " def add(x, y):")


def grade_local(repo: Path, inst: Instance, patch: str, tmp_path: Path):
    from nexus.sandbox import SandboxLimits, create_sandbox

    limits = SandboxLimits(max_output_bytes=1 << 20)
    with create_sandbox(LOCAL, repo, base_commit=inst.base_commit, limits=limits) as sb:
        run = run_eval(sb, inst, patch, timeout_s=120)
    log = tmp_path / f"log-{abs(hash(patch))}.txt"
    log.write_text(run.log)
    return run, report_for_log(inst, Prediction(inst.instance_id, "t", patch), log)[inst.instance_id]


def test_gold_resolves_and_empty_does_not(calc, tmp_path):
    repo, inst = calc
    run, rep = grade_local(repo, inst, inst.patch, tmp_path)
    assert run.apply_command == "git apply --verbose" and rep["resolved"]
    _, rep = grade_local(repo, inst, "", tmp_path)
    assert not rep["resolved"] and rep["tests_status"]["FAIL_TO_PASS"]["failure"] == [ADD]


def test_patch_fallback_and_broken_patches(calc, tmp_path):
    repo, inst = calc
    run, rep = grade_local(repo, inst, fuzzy(inst.patch), tmp_path)
    assert run.apply_command.startswith("patch --batch") and rep["resolved"]
    run, rep = grade_local(repo, inst, "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n",
                           tmp_path)
    assert not run.patch_applied and not rep["patch_successfully_applied"] and not rep["resolved"]


def test_a_model_edit_of_the_hidden_test_file_is_overridden(calc, tmp_path):
    repo, inst = calc
    cheat = inst.patch.replace("+    return a + b", "+    return a - b + 2 * b") + TEST_PATCH.replace(
        "self.assertEqual(add(2, 3), 5)", "self.assertTrue(True)")
    run, rep = grade_local(repo, inst, cheat, tmp_path)
    assert run.patch_applied and rep["resolved"]  # still graded by the real hidden test, which passes: a+b
    breaking = diff_for(repo, SRC.replace("return a - b", "return a + b").replace("return a * b", "return 0"))
    _, rep = grade_local(repo, inst, breaking, tmp_path)
    assert not rep["resolved"] and rep["tests_status"]["PASS_TO_PASS"]["failure"] == [MUL]


def test_model_changes_to_test_files_and_runner_config_are_reverted(calc, tmp_path):
    from nexus.evals.swebench.repos import worktree_diff

    repo, inst = calc
    (repo / "calc.py").write_text(SRC.replace("return a - b", "return a + b"))
    (repo / "test_mul.py").write_text(OLD_TEST.replace("mul(2, 3), 6", "mul(2, 3), 7"))  # would fail if kept
    (repo / "conftest.py").write_text("import pytest\n")
    patch = worktree_diff(repo)
    git(repo, "checkout", "-q", "--", ".")
    (repo / "conftest.py").unlink()
    run, rep = grade_local(repo, inst, patch, tmp_path)
    assert run.tamper.reverted == ["test_mul.py"] and run.tamper.dropped == ["conftest.py"]
    assert rep["resolved"]  # the library fix stays, the base test_mul.py ran
    assert "dropped: conftest.py" in run.log


def test_a_patch_that_writes_into_git_is_not_applied(calc, tmp_path):
    repo, inst = calc
    hook = ("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n"
            "--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+echo hi\n")
    run, rep = grade_local(repo, inst, inst.patch + hook, tmp_path)
    assert not run.patch_applied and "inside .git" in run.refused and not rep["resolved"]
