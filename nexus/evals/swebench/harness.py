"""Run an instance's tests in a fresh sandbox and write a log in swebench's format (its markers, its parser).

Steps, as in swebench's harness: apply the model patch (git apply, then the same fallbacks swebench uses), reset
the test files the test_patch touches to the base commit, apply the test_patch, run the test command between the
start/end markers and record its exit code.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass

from swebench.harness.constants import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TESTS_TIMEOUT,
)

from nexus.evals.swebench.instances import Instance

# swebench.harness.run_evaluation.GIT_APPLY_CMDS; copied because importing that module pulls in modal and
# datasets (about 3 s) for one list of strings. tests/evals_swebench checks the two stay equal.
GIT_APPLY_CMDS = [
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
]
# Inside .git: writable in every sandbox, never part of the work tree or its diff.
MODEL_PATCH_FILE = ".git/nexus-model.patch"
TEST_PATCH_FILE = ".git/nexus-test.patch"
_DIFF_FILES = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


@dataclass(frozen=True)
class EvalRun:
    log: str  # the whole log, swebench markers included
    patch_applied: bool
    apply_command: str | None
    test_exit_code: int | None
    seconds: float


def patched_files(patch: str) -> list[str]:
    return sorted({b for _, b in _DIFF_FILES.findall(patch)})


def apply_patch(sandbox, patch: str, path: str = MODEL_PATCH_FILE) -> tuple[bool, str | None, str]:
    """Try each apply command in turn; return (applied, command, log)."""
    sandbox.write_file(path, patch)
    log = []
    for cmd in GIT_APPLY_CMDS:
        res = sandbox.execute(f"{cmd} {path}", timeout=120)
        log.append(f"$ {cmd} {path}\n{res.output}")
        if res.returncode == 0:
            return True, cmd, "\n".join(log)
        # --reject / patch leave partial state behind; start the next attempt from a clean tree.
        sandbox.execute("git checkout -q -- . && git clean -q -fd >/dev/null 2>&1 || true", timeout=60)
    return False, None, "\n".join(log)


def run_eval(sandbox, instance: Instance, model_patch: str | None, *, timeout_s: float = 1800) -> EvalRun:
    """`sandbox` is started and at the base commit. Never raises for a bad patch: that is a verdict, not a crash."""
    t0 = time.monotonic()
    parts: list[str] = []
    applied, how = True, None
    if model_patch:
        applied, how, apply_log = apply_patch(sandbox, model_patch)
        parts.append(apply_log)
        parts.append(f"{APPLY_PATCH_PASS} ({how})" if applied else f"{APPLY_PATCH_FAIL}")
    if not applied:
        return EvalRun("\n".join(parts) + "\n", False, None, None, time.monotonic() - t0)
    test_files = patched_files(instance.test_patch)
    if test_files:
        # The model may have edited the files the test patch rewrites: the hidden tests win, as in swebench.
        quoted = " ".join(shlex.quote(f) for f in test_files)
        reset = (f"for f in {quoted}; do if git cat-file -e {instance.base_commit}:\"$f\" 2>/dev/null; "
                 f"then git checkout -q {instance.base_commit} -- \"$f\"; else rm -f \"$f\"; fi; done")
        res = sandbox.execute(reset, timeout=60)
        parts.append(f"$ reset test files\n{res.output}")
    if instance.test_patch:
        sandbox.write_file(TEST_PATCH_FILE, instance.test_patch)
        res = sandbox.execute(f"git apply --verbose {TEST_PATCH_FILE}", timeout=120)
        parts.append(f"$ git apply --verbose {TEST_PATCH_FILE}\n{res.output}")
        if res.returncode != 0:
            parts.append(f"{APPLY_PATCH_FAIL} (test patch)")
            return EvalRun("\n".join(parts) + "\n", False, how, None, time.monotonic() - t0)
    cmd = instance.test_cmd if isinstance(instance.test_cmd, str) else " && ".join(instance.test_cmd or [])
    if not cmd:
        cmd = "python -m pytest -rA -p no:cacheprovider"
    res = sandbox.execute(cmd, timeout=timeout_s)
    parts.append(f"$ {cmd}")
    parts.append(START_TEST_OUTPUT)
    parts.append(res.output.rstrip("\n"))
    parts.append(END_TEST_OUTPUT)
    if res.timed_out:
        parts.append(f"{TESTS_TIMEOUT} after {timeout_s:.0f} s")
    parts.append(f"{TEST_EXIT_CODE}: {res.returncode}")
    return EvalRun("\n".join(parts) + "\n", applied, how, res.returncode, time.monotonic() - t0)
