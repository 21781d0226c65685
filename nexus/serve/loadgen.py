"""A load generator for `nexus serve`: C concurrent agents-like clients, T turns each, every reply checked.

Each client is one conversation that grows the way an agent's does: a user turn carrying an observation (a slice
of a real source file) and a short reply, repeated. Used by benchmarks/serve_load.py and the load test.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

SOURCE = Path(__file__).resolve().parents[1] / "runtime" / "stream.py"  # observations: real code, not filler


class MalformedReply(Exception):
    pass


def marker(client: int) -> str:
    return f"[client-{client}]"


def _observation(client: int, turn: int, chars: int) -> str:
    text = SOURCE.read_text()
    start = ((client * 7 + turn) * chars) % max(len(text) - chars, 1)
    return text[start:start + chars]


def _check(r: httpx.Response) -> dict:
    if r.status_code != 200:
        raise MalformedReply(f"HTTP {r.status_code}: {r.text[:200]}")
    body = r.json()
    choice = (body.get("choices") or [{}])[0]
    content = (choice.get("message") or {}).get("content")
    usage = body.get("usage") or {}
    if not isinstance(content, str) or choice.get("finish_reason") not in ("stop", "length") \
            or not isinstance(usage.get("prompt_tokens"), int) or body.get("object") != "chat.completion":
        raise MalformedReply(f"not a chat.completion: {str(body)[:200]}")
    return body


def run_client(base_url: str, client: int, turns: int, max_tokens: int, observation_chars: int,
               model: str, headers: dict, timeout: float) -> list[dict]:
    messages = [{"role": "system", "content": "You are a coding agent. Reply with one shell command."}]
    records = []
    with httpx.Client(timeout=timeout, headers=headers) as http:
        for turn in range(turns):
            obs = _observation(client, turn, observation_chars)
            messages.append({"role": "user", "content": f"{marker(client)} turn {turn} output:\n{obs}"})
            t0 = time.perf_counter()
            body = _check(http.post(f"{base_url}/chat/completions", json={
                "model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}))
            seconds = time.perf_counter() - t0
            nexus = body.get("nexus") or {}
            stats = nexus.get("stats") or {}
            records.append({
                "client": client, "turn": turn, "seconds": seconds,
                "prompt_tokens": body["usage"]["prompt_tokens"],
                "cached_tokens": body["usage"].get("prompt_tokens_details", {}).get("cached_tokens"),
                "completion_tokens": body["usage"]["completion_tokens"], "session_id": nexus.get("session_id"),
                "rebuilt": nexus.get("rebuilt"), "tokens_stored": stats.get("tokens_stored"),
                "cache_bytes": stats.get("cache_bytes"),
            })
            messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    return records


def run_load(base_url: str, clients: int = 4, turns: int = 5, max_tokens: int = 16, observation_chars: int = 800,
             model: str = "embedded", api_key: str | None = None, timeout: float = 600) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        per_client = list(pool.map(lambda c: run_client(base_url, c, turns, max_tokens, observation_chars, model,
                                                        headers, timeout), range(clients)))
    wall = time.perf_counter() - t0
    records = [r for rs in per_client for r in rs]
    latencies = sorted(r["seconds"] for r in records)
    q = statistics.quantiles(latencies, n=20, method="inclusive") if len(latencies) > 1 else latencies * 19
    return {
        "clients": clients, "turns": turns, "max_tokens": max_tokens, "wall_seconds": wall,
        "turns_per_second": len(records) / wall, "p50_seconds": statistics.median(latencies),
        "p95_seconds": q[18], "rebuilds": sum(r["rebuilt"] is not None for r in records), "records": records,
    }
