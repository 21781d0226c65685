"""SWE-bench task instances: load .json / .jsonl / .parquet, validate every row, keep the good ones.

Field names are the official ones. FAIL_TO_PASS / PASS_TO_PASS are JSON-encoded lists in the official files (and
in what `to_row` writes); plain lists are accepted too. A bad row is reported with its id and field and skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexus.errors import NexusError

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "FAIL_TO_PASS", "PASS_TO_PASS")
OPTIONAL_TEXT = ("hints_text", "test_patch", "version", "environment_setup_commit", "created_at")
NEWER = ("image", "eval_script", "log_parser", "eval_type", "test_cmd")
EVAL_TYPES = ("pass_and_fail", "fail_only")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")


@dataclass(frozen=True)
class Instance:
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    test_patch: str = ""
    hints_text: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    created_at: str = ""
    image: str | None = None
    eval_script: str | None = None
    log_parser: str | None = None
    eval_type: str | None = None
    test_cmd: str | list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_row(self) -> dict[str, Any]:
        """The official row: test lists JSON-encoded, newer optional fields only when set."""
        row: dict[str, Any] = {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "problem_statement": self.problem_statement,
            "hints_text": self.hints_text,
            "patch": self.patch,
            "test_patch": self.test_patch,
            "FAIL_TO_PASS": json.dumps(self.FAIL_TO_PASS),
            "PASS_TO_PASS": json.dumps(self.PASS_TO_PASS),
            "version": self.version,
            "environment_setup_commit": self.environment_setup_commit,
            "created_at": self.created_at,
        }
        for name in NEWER:
            value = getattr(self, name)
            if value is not None:
                row[name] = value
        row.update(self.extra)
        return row


@dataclass(frozen=True)
class Problem:
    """One invalid row: which instance (or row number), which field, what is wrong."""

    instance_id: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.instance_id}: field {self.field}: {self.message}"


@dataclass
class LoadResult:
    instances: list[Instance]
    problems: list[Problem]

    def by_id(self) -> dict[str, Instance]:
        return {i.instance_id: i for i in self.instances}


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl, .json (a list, or a dict keyed by instance id) or .parquet file."""
    p = Path(path)
    if not p.is_file():
        raise NexusError(f"Instances file {p} does not exist; pass a .json, .jsonl or .parquet SWE-bench file.")
    suffix = p.suffix.lower()
    try:
        if suffix == ".jsonl":
            rows = []
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        rows.append({"__error__": f"line {n} is not JSON ({e.msg})", "__row__": n})
            return rows
        if suffix == ".json":
            data = json.loads(p.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return [dict(v, instance_id=v.get("instance_id", k)) for k, v in data.items()]
            if isinstance(data, list):
                return data
            raise NexusError(f"{p} holds a JSON {type(data).__name__}; expected a list of instances or a dict.")
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(p).to_pylist()
    except json.JSONDecodeError as e:
        raise NexusError(f"{p} is not valid JSON ({e.msg} at line {e.lineno}); fix or regenerate the file.") from None
    raise NexusError(f"{p} has suffix {suffix!r}; instances must be .json, .jsonl or .parquet.")


def _test_list(value: Any) -> list[str]:
    if isinstance(value, str):
        value = json.loads(value)  # official files JSON-encode the lists
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError("must be a list of test names (or its JSON encoding)")
    return list(value)


def validate_row(row: Any, index: int) -> tuple[Instance | None, list[Problem]]:
    if not isinstance(row, dict):
        return None, [Problem(f"row {index}", "-", f"is a {type(row).__name__}, not an object")]
    if "__error__" in row:
        return None, [Problem(f"row {row['__row__']}", "-", row["__error__"])]
    iid = row.get("instance_id")
    name = iid if isinstance(iid, str) and iid else f"row {index}"
    problems: list[Problem] = []

    def bad(fld: str, msg: str) -> None:
        problems.append(Problem(name, fld, msg))

    for fld in REQUIRED:
        if row.get(fld) is None:
            bad(fld, "is missing")
    if problems:
        return None, problems
    values: dict[str, Any] = {}
    for fld in ("instance_id", "repo", "base_commit", "problem_statement", "patch"):
        if not isinstance(row[fld], str):
            bad(fld, f"must be a string, got {type(row[fld]).__name__}")
        values[fld] = row[fld]
    if isinstance(row["instance_id"], str) and not row["instance_id"].strip():
        bad("instance_id", "is empty")
    if isinstance(row["repo"], str) and not _REPO.match(row["repo"]):
        bad("repo", f"{row['repo']!r} is not of the form owner/name")
    if isinstance(row["base_commit"], str) and not _SHA.match(row["base_commit"]):
        bad("base_commit", f"{row['base_commit']!r} is not a git commit sha")
    for fld in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        try:
            values[fld] = _test_list(row[fld])
        except json.JSONDecodeError:
            bad(fld, "is not a JSON-encoded list")
        except ValueError as e:
            bad(fld, str(e))
    if "FAIL_TO_PASS" in values and not values["FAIL_TO_PASS"]:
        bad("FAIL_TO_PASS", "is empty: an instance needs at least one test that the fix makes pass")
    for fld in OPTIONAL_TEXT:
        v = row.get(fld)
        if v is None:
            values[fld] = ""
        elif isinstance(v, (str, int, float)):
            values[fld] = str(v)  # some dumps store version as a number
        else:
            bad(fld, f"must be a string, got {type(v).__name__}")
    for fld in ("image", "eval_script", "log_parser", "eval_type"):
        v = row.get(fld)
        if v is not None and not isinstance(v, str):
            bad(fld, f"must be a string, got {type(v).__name__}")
        values[fld] = v or None
    if values.get("eval_type") and values["eval_type"] not in EVAL_TYPES:
        bad("eval_type", f"{values['eval_type']!r} is not one of {', '.join(EVAL_TYPES)}")
    if values.get("log_parser"):
        from swebench.harness.log_parsers import PARSER_REGISTRY

        if values["log_parser"] not in PARSER_REGISTRY:
            bad("log_parser", f"{values['log_parser']!r} is not a swebench log parser")
    if values.get("eval_script"):  # was accepted and then ignored (the fallback pytest ran): say so instead
        bad("eval_script", "is not supported (nexus grades with test_cmd, or plain pytest); put the test command "
            "in test_cmd and drop eval_script")
    tc = row.get("test_cmd")
    if tc is not None and not (isinstance(tc, str) or (isinstance(tc, list) and all(isinstance(c, str) for c in tc))):
        bad("test_cmd", "must be a string or a list of strings")
    values["test_cmd"] = tc
    if problems:
        return None, problems
    known = set(REQUIRED) | set(OPTIONAL_TEXT) | set(NEWER)
    extra = {k: v for k, v in row.items() if k not in known}
    return Instance(**values, extra=extra), []


def load_instances(path: str | Path, ids: list[str] | None = None) -> LoadResult:
    """Load and validate; `ids` keeps only those instances (an unknown id is reported as a problem)."""
    instances: list[Instance] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, row in enumerate(read_rows(path)):
        inst, probs = validate_row(row, index)
        problems.extend(probs)
        if inst is None:
            continue
        if inst.instance_id in seen:
            problems.append(Problem(inst.instance_id, "instance_id", "appears more than once; the first is kept"))
            continue
        seen.add(inst.instance_id)
        instances.append(inst)
    if ids:
        wanted = list(dict.fromkeys(ids))
        missing = [i for i in wanted if i not in seen]
        problems.extend(Problem(i, "instance_id", "was asked for with --ids but is not in the file") for i in missing)
        keep = set(wanted)
        instances = [i for i in instances if i.instance_id in keep]
    return LoadResult(instances, problems)
