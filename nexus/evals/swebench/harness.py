"""Run an instance's tests in a fresh sandbox and write a log in swebench's format (its markers, its parser).

Steps, as in swebench's harness: apply the model patch (git apply, then the same fallbacks swebench uses), put
every test file and every piece of test-runner configuration back to the base commit (nexus.evals.swebench.tamper:
swebench resets only the test_patch's files), apply the test_patch, run the test command between the start/end
markers (a plain pytest command hardened: nexus.evals.swebench.pytest_cmd) and record docker's exit code for it.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass

from swebench.harness.constants import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    END_TEST_OUTPUT,
    RESET_FAILED,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TESTS_TIMEOUT,
)

from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.pytest_cmd import base_config, harden
from nexus.evals.swebench.tamper import TamperReport, revert_test_infrastructure, scan, unsafe_paths, untracked
from nexus.sandbox.errors import SandboxError

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
_MARKER_RUN = re.compile(r">(?=>{4})")


@dataclass(frozen=True)
class EvalRun:
    log: str  # the whole log, swebench markers included
    patch_applied: bool
    apply_command: str | None
    test_exit_code: int | None
    seconds: float
    tamper: TamperReport | None = None  # what was reverted/dropped before the tests, what the scan flagged
    hardened: bool = False  # the test command ran as a hardened pytest invocation with a junit report
    junit_xml: str | None = None  # that report, read back from the sandbox
    refused: str | None = None  # why the patch was not applied at all


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


def defang(output: str) -> str:
    """Test output with every run of five '>' broken up: only the harness may write swebench's markers (the
    parser trusts the first `Test Exit Code` line and splits the log at the first start/end marker)."""
    return _MARKER_RUN.sub("> ", output)


def _fail(parts: list[str], applied: bool, how: str | None, t0: float, tamper: TamperReport | None = None,
          refused: str | None = None) -> EvalRun:
    return EvalRun("\n".join(parts) + "\n", applied, how, None, time.monotonic() - t0, tamper=tamper,
                   refused=refused)


def run_eval(sandbox, instance: Instance, model_patch: str | None, *, timeout_s: float = 1800) -> EvalRun:
    """`sandbox` is started and at the base commit. Never raises for a bad patch: that is a verdict, not a crash."""
    t0 = time.monotonic()
    parts: list[str] = []
    applied, how = True, None
    if model_patch and (bad := unsafe_paths(model_patch)):
        refused = f"the patch writes inside .git ({', '.join(bad[:3])}), which the grader does not apply"
        return _fail([f"{APPLY_PATCH_FAIL} ({refused})"], False, None, t0, refused=refused)
    before = untracked(sandbox)  # raises on a broken sandbox: an infrastructure error, retried by the grader
    if model_patch:
        applied, how, apply_log = apply_patch(sandbox, model_patch)
        parts.append(apply_log)
        parts.append(f"{APPLY_PATCH_PASS} ({how})" if applied else f"{APPLY_PATCH_FAIL}")
    if not applied:
        return _fail(parts, False, None, t0)
    try:
        tamper = revert_test_infrastructure(sandbox, instance.base_commit, patched_files(instance.test_patch), before)
    except RuntimeError as e:
        parts.append(f"{RESET_FAILED} ({e})")
        return _fail(parts, True, how, t0)
    tamper.suspicious = scan(model_patch or "", set(tamper.dropped) | set(tamper.reverted))
    parts.append("$ revert test files and test-runner configuration to the base commit\n"
                 f"reverted: {', '.join(tamper.reverted) or '-'}\ndropped: {', '.join(tamper.dropped) or '-'}")
    if instance.test_patch:
        sandbox.write_file(TEST_PATCH_FILE, instance.test_patch)
        res = sandbox.execute(f"git apply --verbose {TEST_PATCH_FILE}", timeout=120)
        parts.append(f"$ git apply --verbose {TEST_PATCH_FILE}\n{res.output}")
        if res.returncode != 0:
            parts.append(f"{APPLY_PATCH_FAIL} (test patch)")
            return _fail(parts, False, how, t0, tamper)
    cmd = instance.test_cmd if isinstance(instance.test_cmd, str) else " && ".join(instance.test_cmd or [])
    if not cmd:
        cmd = "python -m pytest -rA -p no:cacheprovider"
    # Created only now, under a random name: nothing the patch contains can be waiting there.
    token = secrets.token_hex(16)
    workdir = sandbox.execute("pwd -P", timeout=30).output.strip()
    rel = f".git/nexus-grade-{token}"
    junit_rel = f"{rel}/junit.xml"
    mk = sandbox.execute(f"mkdir -m 700 {rel}", timeout=30)
    if mk.returncode != 0:
        raise RuntimeError(f"could not create the harness directory {rel} (exit {mk.returncode}): {mk.output[-200:]}")
    cfg_name, cfg_text = base_config(sandbox, instance.base_commit)
    sandbox.write_file(f"{rel}/{cfg_name}", cfg_text)
    hardened = harden(cmd, workdir=workdir, config=f"{workdir}/{rel}/{cfg_name}", junit=f"{workdir}/{junit_rel}")
    res = sandbox.execute(hardened or cmd, timeout=timeout_s)
    junit = None
    if hardened:
        try:
            junit = sandbox.read_file(junit_rel)
        except SandboxError:
            junit = None  # the cross-check treats a missing report as "no test passed"
    parts.append(f"$ {hardened or cmd}")
    parts.append(START_TEST_OUTPUT)
    parts.append(defang(res.output).rstrip("\n"))
    parts.append(END_TEST_OUTPUT)
    if res.timed_out:
        parts.append(f"{TESTS_TIMEOUT} after {timeout_s:.0f} s")
    # docker's exit code for the exec, not anything the tests printed.
    parts.append(f"{TEST_EXIT_CODE}: {res.returncode}")
    return EvalRun("\n".join(parts) + "\n", applied, how, res.returncode, time.monotonic() - t0, tamper=tamper,
                   hardened=hardened is not None, junit_xml=junit)
