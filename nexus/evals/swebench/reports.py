"""The run report, with the field names of swebench's `make_run_report`.

swebench's own `make_run_report` reads reports from its fixed `logs/run_evaluation/<run_id>/<model>/` layout and
prints as it goes, so the same sets are computed here from our `<out>/<instance_id>/report.json` files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.predictions import Prediction


def make_run_report(
    instances: list[Instance], predictions: dict[str, Prediction], out_dir: Path, *, run_empty: bool = False
) -> dict[str, Any]:
    completed, resolved, unresolved, errors, incomplete, empty = set(), set(), set(), set(), set(), set()
    suspicious = set()
    for inst in instances:
        iid = inst.instance_id
        pred = predictions.get(iid)
        if pred is None:
            incomplete.add(iid)
            continue
        if pred.model_patch in ("", None):
            empty.add(iid)
            if not run_empty:
                continue
        report_file = out_dir / iid / "report.json"
        if not report_file.exists():
            errors.add(iid)
            continue
        try:
            row = json.loads(report_file.read_text())[iid]
        except (ValueError, KeyError):
            errors.add(iid)
            continue
        if (row.get("nexus") or {}).get("suspicious"):
            suspicious.add(iid)
        if (row.get("nexus") or {}).get("error"):  # graded, but its test report contradicts itself
            errors.add(iid)
            continue
        completed.add(iid)
        (resolved if row.get("resolved") else unresolved).add(iid)
    ids = {i.instance_id for i in instances}
    model = next((p.model_name_or_path for p in predictions.values()), "")
    return {
        "model_name_or_path": model,
        "total_instances": len(instances),
        "submitted_instances": len(set(predictions) & ids),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(incomplete),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(set(predictions) & ids),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
        "error_ids": sorted(errors),
        "schema_version": 2,
        "suspicious_ids": sorted(suspicious),  # nexus: library code in the patch reaches for the test runner
    }
