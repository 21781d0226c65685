"""`nexus eval swebench grade`: one fresh container per instance, apply the patch, run the tests, grade, report.

Per instance `<out>/<instance_id>/` holds patch.diff, test_output.txt and report.json (swebench's format); the
run report `<out>/run_report.json` uses the official field names. Finished instances (report.json present for
the same patch) are not graded again, so an interrupted grade resumes.
"""

from __future__ import annotations

import hashlib
import json
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from nexus.errors import NexusError
from nexus.evals.swebench.environment import ensure_instance_image
from nexus.evals.swebench.executors import run_parallel
from nexus.evals.swebench.grading import DEFAULT_PARSER, logs_eval, report_for_log
from nexus.evals.swebench.harness import run_eval
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.io import write_json_atomic, write_text_atomic
from nexus.evals.swebench.junit import TAMPERED, check
from nexus.evals.swebench.predictions import Prediction
from nexus.evals.swebench.recipe import Recipe
from nexus.evals.swebench.repos import find_repo
from nexus.evals.swebench.reports import make_run_report
from nexus.sandbox.errors import SandboxUnavailable

OUTPUT_CAP = 16 << 20  # test logs must reach the parser whole: a cut summary would lose test statuses


@dataclass(frozen=True)
class GradeConfig:
    out_dir: Path
    repos: Path | None = None
    repo_url: str | None = None
    workers: int = 2
    timeout_s: float = 1800
    run_empty: bool = False  # official harness: an empty patch is "empty_patch", not run; True runs it anyway
    memory_mb: int = 2048
    attempts: int = 2  # fresh containers tried per instance before it counts as an error
    strict: bool = False  # a patch flagged suspicious (library code reaching for the test runner) is unresolved
    recipe: Recipe | None = None  # builds missing task-set images (default: the bundled recipe)


def _patch_digest(patch: str | None) -> str:
    return hashlib.sha256((patch or "").encode()).hexdigest()


def grade_instance(instance: Instance, prediction: Prediction, cfg: GradeConfig) -> dict[str, Any]:
    """Grade one prediction; returns swebench's report row for it. Writes the instance's files atomically."""
    from nexus.sandbox import SandboxLimits, create_sandbox

    d = cfg.out_dir / instance.instance_id
    write_text_atomic(d / "patch.diff", prediction.model_patch or "")
    image = ensure_instance_image(instance, cfg.recipe)
    repo = find_repo(instance, mirror=cfg.repos, url_template=cfg.repo_url)
    limits = SandboxLimits(memory_mb=cfg.memory_mb, max_output_bytes=OUTPUT_CAP)
    with create_sandbox("docker", repo, base_commit=instance.base_commit, image=image,
                        task_id=f"grade-{instance.instance_id}", limits=limits) as sb:
        run = run_eval(sb, instance, prediction.model_patch, timeout_s=cfg.timeout_s)
    log_path = d / "test_output.txt"
    write_text_atomic(log_path, run.log)
    report = report_for_log(instance, prediction, log_path)
    row = report[instance.instance_id]
    row["nexus"] = {
        "patch_sha256": _patch_digest(prediction.model_patch),
        "apply_command": run.apply_command,
        "test_exit_code": run.test_exit_code,
        "seconds": round(run.seconds, 2),
        **({"refused": run.refused} if run.refused else {}),
    }
    _integrity(row, instance, run, log_path, strict=cfg.strict)
    write_json_atomic(d / "report.json", report)
    (d / "error.txt").unlink(missing_ok=True)
    return report


def _integrity(row: dict[str, Any], instance: Instance, run, log_path: Path, *, strict: bool) -> None:
    """Add what the harness reverted and flagged to `row`; a report that disagrees with itself is an error."""
    nx = row["nexus"]
    if run.tamper is None:  # the patch did not apply: no tests ran
        return
    nx.update(run.tamper.to_json())
    if not run.hardened:
        nx["report_check"] = "not checked: the test command is not a plain pytest command"
    elif (instance.log_parser or DEFAULT_PARSER) != DEFAULT_PARSER:
        nx["report_check"] = f"not checked: log parser {instance.log_parser} has its own test ids"
    else:
        status, ok = logs_eval(instance, log_path)
        tests = list(instance.FAIL_TO_PASS) + list(instance.PASS_TO_PASS)
        # swebench found no usable output (ok False): for it no test passed, so the junit report must agree.
        problems = check(tests, status if ok else {}, run.junit_xml, run.test_exit_code)
        nx["report_check"] = problems or "consistent"
        if problems:
            nx["error"] = f"{TAMPERED}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if problems[1:] else "")
            row["resolved"] = False
    if strict and nx["suspicious"] and row["resolved"]:
        nx["strict"] = "unresolved: the patch's library code reaches for the test runner (see suspicious)"
        row["resolved"] = False


def transient(e: Exception) -> bool:
    """Worth another fresh container: anything but an error the user's configuration causes (a NexusError says
    what to fix), except the engine or container going away."""
    return isinstance(e, SandboxUnavailable) or not isinstance(e, NexusError)


def error_sentence(e: Exception) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, NexusError) else f"{type(e).__name__}: {text}"


def errors(out_dir: Path, report: dict[str, Any]) -> dict[str, str]:
    """Instance id -> the one sentence its error.txt (or its report's error field) starts with."""
    found = {}
    for iid in report.get("error_ids", []):
        d = out_dir / iid
        try:
            found[iid] = (d / "error.txt").read_text().splitlines()[0]
        except (OSError, IndexError):
            try:
                found[iid] = next(iter(json.loads((d / "report.json").read_text()).values()))["nexus"]["error"]
            except (OSError, ValueError, StopIteration, KeyError, TypeError):
                found[iid] = "no error recorded"
    return found


def _finished(d: Path, prediction: Prediction) -> bool:
    try:
        report = json.loads((d / "report.json").read_text())
        row = next(iter(report.values()))
        return row.get("nexus", {}).get("patch_sha256") == _patch_digest(prediction.model_patch)
    except (OSError, ValueError, StopIteration, AttributeError):
        return False


def grade(
    instances: list[Instance],
    predictions: dict[str, Prediction],
    cfg: GradeConfig,
    *,
    progress: bool = True,
    on_result: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Grade every instance that has a non-empty prediction; returns (and writes) the run report."""
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    todo = []
    for inst in instances:
        pred = predictions.get(inst.instance_id)
        if pred is None or (not pred.model_patch and not cfg.run_empty):
            continue
        if _finished(cfg.out_dir / inst.instance_id, pred):
            continue
        todo.append((inst, pred))

    def work(item: tuple[Instance, Prediction]) -> str:
        inst, pred = item
        d = cfg.out_dir / inst.instance_id
        for attempt in range(1, cfg.attempts + 1):
            try:
                row = grade_instance(inst, pred, cfg)[inst.instance_id]
                if row["nexus"].get("error"):
                    return "error"
                return "resolved" if row["resolved"] else "unresolved"
            except Exception as e:  # one broken instance must not stop the others; the run report lists it
                # error.txt's first line is the one sentence `grade` prints for the instance.
                write_text_atomic(d / "error.txt", f"{error_sentence(e)}\n\nattempt {attempt}: "
                                  f"{type(e).__name__}\n{traceback.format_exc()}")
                (d / "report.json").unlink(missing_ok=True)
                # Infrastructure hiccups (a container that did not come up) get another fresh container; a
                # configuration error (no image, no repository) would fail the same way again. The verdict never
                # depends on the attempt, since each one starts from the base commit.
                if not transient(e):
                    break
        return "error"

    run_parallel(work, todo, workers=cfg.workers, desc="grading", progress=progress,
                 key=lambda item: item[0].instance_id, on_result=on_result)
    report = make_run_report(instances, predictions, cfg.out_dir, run_empty=cfg.run_empty)
    write_json_atomic(cfg.out_dir / "run_report.json", report)
    return report
