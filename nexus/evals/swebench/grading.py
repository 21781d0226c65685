"""Verdicts from test logs, computed by the `swebench` package's own grading code (used as a library).

`report_for_log` is swebench's `get_eval_report` on a TestSpec made from our instance; `status_map` is its log
parser. Nothing here re-implements resolution rules: F2P all passing and P2P all maintained is swebench's call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swebench.harness.grading import get_eval_report, get_logs_eval
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.predictions import Prediction

DEFAULT_PARSER = "parse_log_pytest"
DEFAULT_EVAL_TYPE = "pass_and_fail"


def test_spec(instance: Instance) -> TestSpec:
    return TestSpec(
        instance_id=instance.instance_id,
        image=instance.image or "",
        eval_script_list=[],  # our harness runs the steps itself; grading only needs the fields below
        repo=instance.repo,
        version=instance.version,
        FAIL_TO_PASS=list(instance.FAIL_TO_PASS),
        PASS_TO_PASS=list(instance.PASS_TO_PASS),
        log_parser=instance.log_parser or DEFAULT_PARSER,
        eval_type=instance.eval_type or DEFAULT_EVAL_TYPE,
    )


def status_map(instance: Instance, log_text: str) -> dict[str, str]:
    """Test name -> PASSED/FAILED/... from the part of the log between swebench's markers."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    if START_TEST_OUTPUT in log_text:
        log_text = log_text.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    parser = PARSER_REGISTRY[instance.log_parser or DEFAULT_PARSER]
    return parser(log_text, test_spec(instance))


def logs_eval(instance: Instance, log_path: str | Path) -> tuple[dict[str, str], bool]:
    return get_logs_eval(test_spec(instance), str(log_path))


def report_for_log(instance: Instance, prediction: Prediction, log_path: str | Path) -> dict[str, Any]:
    """swebench's per-instance report: {instance_id: {patch_exists, patch_successfully_applied, resolved,
    tests_status, ...}}."""
    return get_eval_report(
        test_spec(instance),
        {"instance_id": prediction.instance_id, "model_name_or_path": prediction.model_name_or_path,
         "model_patch": prediction.model_patch},
        str(log_path),
        include_tests_status=True,
    )
