"""A suite's output directory: settings, items and one record per (item, policy, budget), written atomically after
every record so an interrupted run resumes where it stopped and never leaves half a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus.atomic import write_json_atomic
from nexus.errors import NexusError


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise NexusError(f"Cannot read {path} ({exc}); delete it or pass --fresh to start the run over.") from exc


class SuiteStore:
    def __init__(self, out_dir: Path, suite: str):
        self.dir = Path(out_dir) / suite
        self.suite = suite
        self.records: dict[str, dict] = {}

    @staticmethod
    def key(item_id: str, policy: str, budget: str) -> str:
        return f"{item_id}|{policy}|{budget}"

    def open(self, settings: dict, fingerprint: str, fresh: bool) -> None:
        """Start or resume; a directory holding a run with other settings is refused, not overwritten."""
        run_file = self.dir / "run.json"
        if fresh:
            for name in ("run.json", "items.json", "records.json"):
                (self.dir / name).unlink(missing_ok=True)
        if run_file.exists():
            old = read_json(run_file)
            if old.get("fingerprint") != fingerprint:
                raise NexusError(
                    f"{self.dir} holds a {self.suite} run with other settings (size, seed, model or chunk size); "
                    "pass --fresh to replace it or choose another --out directory."
                )
            if (self.dir / "records.json").exists():
                self.records = {self.key(r["item"], r["policy"], r["budget"]): r
                                for r in read_json(self.dir / "records.json")}
        write_json_atomic(run_file, {**settings, "fingerprint": fingerprint})

    def items(self) -> list[dict] | None:
        path = self.dir / "items.json"
        return read_json(path) if path.exists() else None

    def save_items(self, items: list[dict]) -> None:
        write_json_atomic(self.dir / "items.json", items)

    def has(self, item_id: str, policy: str, budget: str) -> bool:
        return self.key(item_id, policy, budget) in self.records

    def add(self, record: dict) -> None:
        self.records[self.key(record["item"], record["policy"], record["budget"])] = record
        write_json_atomic(self.dir / "records.json", list(self.records.values()))
