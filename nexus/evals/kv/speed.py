"""Suite 4, speed and memory: one stream per policy fed real text up to 1K..8K tokens seen; at every checkpoint
prefill tokens/s (since the last checkpoint), decode tokens/s, eviction seconds, cache bytes and process peak RSS.

Peak RSS is the process high-water mark since the policy's stream started (reset through /proc/self/clear_refs
where Linux allows it), so it includes the model weights: what matters is how it moves with tokens seen.
"""

from __future__ import annotations

import ctypes
import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from nexus.evals.kv.corpus import corpus
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.budget import kv_bytes_per_token


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def release_free_memory() -> None:
    """Hand memory freed by earlier streams back to the OS (glibc keeps it otherwise, and it would count as RSS)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark for this process (Linux >= 4.0); False where not allowed."""
    release_free_memory()
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int | None:
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024


@dataclass
class SpeedConfig:
    budget: int = 1024
    checkpoints: tuple[int, ...] = (1024, 2048, 4096, 8192)
    decode_tokens: int = 32
    chunk_size: int = 256
    seed: int = 0


def stream_text_ids(tokenizer, need: int, seed: int) -> list[int]:
    """At least `need` tokens of real text (source files and command transcripts, concatenated)."""
    ids: list[int] = []
    for doc in corpus(seed):
        ids += tokenizer.encode(doc.text, add_special_tokens=False)
        if len(ids) >= need:
            break
    return ids[:need]


def measure_policy(model, tokenizer, name: str, cfg: SpeedConfig, ids: list[int],
                   params: dict | None = None, on_point: Callable[[dict], None] | None = None) -> list[dict]:
    """Feed `ids` through one stream of `name`, measuring at every checkpoint; returns one row per checkpoint."""
    gc.collect()
    from nexus.evals.kv.runner import chunk_for

    policy = make_policy(name, **(params or {}))
    chunk = chunk_for(policy, cfg.budget, cfg.chunk_size) or cfg.chunk_size  # 0: let the stream say why
    stream = InferenceStream(model, tokenizer, policy, budget=cfg.budget, chunk_size=chunk, seed=cfg.seed)
    reset_ok = reset_peak_rss()
    per_token = kv_bytes_per_token(model.config, stream.dtype)
    rows, fed = [], 0
    for point in cfg.checkpoints:
        target = point - stream.tokens_seen  # decoded tokens count as seen too
        if target <= 0:
            continue
        piece = ids[fed : fed + target]
        fed += len(piece)
        evict0 = stream.stats.eviction_seconds
        t0 = time.perf_counter()
        stream.append(piece)
        prefill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        stream.generate(cfg.decode_tokens, seed=cfg.seed)
        decode_s = time.perf_counter() - t0
        s = stream.stats
        row = {
            "policy": name, "checkpoint": point, "tokens_seen": s.tokens_seen, "tokens_stored": s.tokens_stored,
            "chunk_size": chunk, "decode_period": policy.decode_period,
            "prefill_tokens_per_s": len(piece) / prefill_s if prefill_s > 0 else None,
            "decode_tokens_per_s": cfg.decode_tokens / decode_s if decode_s > 0 else None,
            "eviction_seconds_total": s.eviction_seconds,
            "eviction_seconds_segment": s.eviction_seconds - evict0,
            "eviction_events": s.eviction_events,
            "cache_bytes": s.cache_bytes, "stored_bytes": s.stored_bytes,
            "budget_bytes": cfg.budget * per_token if policy.evicts else None,
            "peak_rss_bytes": peak_rss_bytes(), "peak_rss_reset": reset_ok,
        }
        rows.append(row)
        if on_point is not None:
            on_point(row)
    return rows


def flatness(rows: list[dict], key: str = "cache_bytes") -> dict:
    """Growth of `key` over the checkpoints: slope in bytes per token seen and the ratio last / first."""
    xs = [r["tokens_seen"] for r in rows]
    ys = [r[key] for r in rows]
    if len(rows) < 2 or xs[-1] == xs[0]:
        return {"slope_bytes_per_token": 0.0, "ratio_last_first": 1.0}
    return {"slope_bytes_per_token": (ys[-1] - ys[0]) / (xs[-1] - xs[0]),
            "ratio_last_first": ys[-1] / ys[0] if ys[0] else float("inf")}


def run_speed(cfg, model, tokenizer, out_dir: Path, fresh: bool = False, command: str = ""):
    """Suite 4 over cfg.policies x cfg.budgets (a density is taken of the last checkpoint); resumable per stream."""
    from tqdm.auto import tqdm

    from nexus.evals.kv.store import SuiteStore

    size = cfg.size
    store = SuiteStore(out_dir, "speed")
    budgets = [b.resolve(size.checkpoints[-1]) for b in cfg.budgets]
    store.open({**cfg.as_dict(), "command": command, "budget": budgets[0] if len(budgets) == 1 else budgets},
               cfg.fingerprint(), fresh)
    ids = stream_text_ids(tokenizer, size.checkpoints[-1], cfg.seed)
    runs = [(p, None if p == "dense" else b) for p in cfg.policies for b in budgets]
    # dense last: its large cache leaves the allocator holding memory that later streams' peaks would include
    runs = sorted(dict.fromkeys(runs), key=lambda run: run[0] == "dense")
    for name, budget in tqdm(runs, desc="kv speed", unit="stream", dynamic_ncols=True):
        label = "any" if budget is None else f"{budget}tok"
        if all(store.has(f"cp{c}", name, label) for c in size.checkpoints):
            continue
        scfg = SpeedConfig(budget=budget or size.checkpoints[-1] + size.decode_tokens * len(size.checkpoints),
                           checkpoints=tuple(size.checkpoints), decode_tokens=size.decode_tokens,
                           chunk_size=cfg.chunk_size, seed=cfg.seed)
        for row in measure_policy(model, tokenizer, name, scfg, ids, cfg.policy_params.get(name)):
            store.add({**row, "item": f"cp{row['checkpoint']}", "budget": label, "budget_tokens": budget})
    return store
