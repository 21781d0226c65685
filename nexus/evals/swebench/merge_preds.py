"""`nexus eval swebench merge-preds`: several predictions files or run directories -> one predictions .jsonl.

Runs split over machines or id ranges each write their own predictions; grading wants one file. An id that
two inputs predict identically is kept once; one they predict differently is refused, since either choice would
silently grade something the user did not pick.
"""

from __future__ import annotations

from pathlib import Path

from nexus.errors import NexusError
from nexus.evals.swebench.predictions import Prediction, load_predictions, write_predictions

# What a run directory's predictions are called: ours, then SWE-agent's.
RUN_DIR_FILES = ("predictions.jsonl", "preds.json")


def predictions_file(path: Path) -> Path:
    """A predictions file as given, or the one a run directory holds."""
    if path.is_dir():
        for name in RUN_DIR_FILES:
            if (path / name).is_file():
                return path / name
        raise NexusError(f"{path} holds no {' or '.join(RUN_DIR_FILES)}; pass a predictions file or a directory "
                         "written by `eval swebench run`.")
    return path  # load_predictions says it when the file does not exist


def merge_predictions(inputs: list[Path]) -> tuple[list[Prediction], int]:
    """The merged predictions in input order, and how many identical duplicates were dropped."""
    merged: dict[str, tuple[Prediction, Path]] = {}
    conflicts: list[str] = []
    duplicates = 0
    for given in inputs:
        source = predictions_file(Path(given))
        for iid, pred in load_predictions(source).items():
            if iid not in merged:
                merged[iid] = (pred, source)
            elif merged[iid][0] == pred:
                duplicates += 1
            else:
                conflicts.append(f"{iid} in {merged[iid][1]} and {source}")
    if conflicts:
        more = f" and {len(conflicts) - 1} more" if len(conflicts) > 1 else ""
        raise NexusError(f"{len(conflicts)} instance id(s) have different predictions in two inputs "
                         f"({conflicts[0]}{more}); remove them from all but one input and merge again.")
    return [pred for pred, _ in merged.values()], duplicates


def merge_to(inputs: list[Path], out: Path) -> tuple[int, int]:
    """Write the merged predictions to `out`; returns (predictions written, identical duplicates dropped)."""
    if out.suffix.lower() != ".jsonl":
        raise NexusError(f"{out} does not end in .jsonl; merged predictions are written in the official .jsonl "
                         "format, so name the output NAME.jsonl.")
    preds, duplicates = merge_predictions(inputs)
    try:
        write_predictions(out, preds)
    except OSError as e:
        raise NexusError(f"Cannot write {out} ({e.strerror or e}); pass an -o path in a writable directory.") from None
    return len(preds), duplicates
