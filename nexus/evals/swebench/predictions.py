"""Predictions in the official format (instance_id, model_name_or_path, model_patch).

Reads .jsonl (official), and the .json forms other tools write: a list of rows, or a dict keyed by instance id
(values either full rows or bare patch strings). `gold` / `empty` build predictions from the instances.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.io import write_jsonl_atomic

GOLD, EMPTY = "gold", "empty"


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_name_or_path: str
    model_patch: str | None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def _from_row(row: Any, where: str, default_model: str) -> Prediction:
    if not isinstance(row, dict):
        raise NexusError(f"{where} is a {type(row).__name__}, not a prediction object; fix the predictions file.")
    iid = row.get("instance_id")
    if not isinstance(iid, str) or not iid:
        raise NexusError(f"{where} has no instance_id; every prediction needs one.")
    patch = row.get("model_patch")
    if patch is not None and not isinstance(patch, str):
        raise NexusError(f"{where} ({iid}) has a model_patch that is not a string; fix the predictions file.")
    model = row.get("model_name_or_path") or default_model
    return Prediction(iid, str(model), patch)


def load_predictions(path: str | Path) -> dict[str, Prediction]:
    """Predictions keyed by instance id. A repeated id keeps the last row (tools append retries)."""
    p = Path(path)
    if not p.is_file():
        raise NexusError(f"Predictions file {p} does not exist; pass a .jsonl/.json file, `gold` or `empty`.")
    default_model = p.stem
    preds: list[Prediction] = []
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise NexusError(f"{p} line {n} is not JSON ({e.msg}); fix or remove that line.") from None
            preds.append(_from_row(row, f"{p} line {n}", default_model))
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise NexusError(f"{p} is not valid JSON ({e.msg} at line {e.lineno}); fix the file.") from None
        if isinstance(data, list):
            preds = [_from_row(r, f"{p} item {i}", default_model) for i, r in enumerate(data)]
        elif isinstance(data, dict):
            for iid, v in data.items():
                row = {"instance_id": iid, "model_patch": v} if isinstance(v, str) or v is None else {
                    "instance_id": iid, **v}
                preds.append(_from_row(row, f"{p} key {iid}", default_model))
        else:
            raise NexusError(f"{p} holds a JSON {type(data).__name__}; expected a list or dict of predictions.")
    return {pr.instance_id: pr for pr in preds}


def special_predictions(kind: str, instances: Iterable[Instance]) -> dict[str, Prediction]:
    """`gold`: the reference patches (validates the instances); `empty`: no patch at all."""
    if kind == GOLD:
        return {i.instance_id: Prediction(i.instance_id, GOLD, i.patch) for i in instances}
    if kind == EMPTY:
        return {i.instance_id: Prediction(i.instance_id, EMPTY, "") for i in instances}
    raise NexusError(f"Unknown special predictions {kind!r}; use `gold`, `empty` or a file path.")


def resolve_predictions(spec: str, instances: Iterable[Instance]) -> dict[str, Prediction]:
    if spec in (GOLD, EMPTY) and not Path(spec).exists():
        return special_predictions(spec, instances)
    return load_predictions(spec)


def write_predictions(path: str | Path, predictions: Iterable[Prediction]) -> None:
    write_jsonl_atomic(path, [p.to_row() for p in predictions])
