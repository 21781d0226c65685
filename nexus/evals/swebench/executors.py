"""Where per-instance work runs: a local thread pool (containers do the heavy lifting) or a Ray cluster."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Iterable, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def run_parallel(
    fn: Callable[[T], str],
    items: Iterable[T],
    *,
    workers: int = 1,
    desc: str = "",
    progress: bool = True,
    key: Callable[[T], str] = str,
    on_result: Callable[[str, str], None] | None = None,
) -> dict[str, str]:
    """Run `fn` on every item (it must catch its own errors and return a short outcome word)."""
    items = list(items)
    outcomes: dict[str, str] = {}
    counts: dict[str, int] = {}
    with tqdm(total=len(items), desc=desc, disable=not progress or not items, unit="inst") as bar:
        def done(item: T, outcome: str) -> None:
            outcomes[key(item)] = outcome
            counts[outcome] = counts.get(outcome, 0) + 1
            bar.set_postfix(counts, refresh=False)
            bar.update(1)
            if on_result is not None:
                on_result(key(item), outcome)

        if workers <= 1:
            for item in items:
                done(item, fn(item))
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = {pool.submit(fn, item): item for item in items}
                for fut in as_completed(futures):
                    done(futures[fut], fut.result())
    return outcomes
