"""4 concurrent clients x 5 turns against one server: well-formed replies, isolated sessions, bounded memory."""

from __future__ import annotations

import httpx
import pytest

from nexus.serve.loadgen import marker, run_load
from tests.serve.conftest import start_server

pytestmark = pytest.mark.slow


def test_concurrent_clients_get_isolated_bounded_sessions(embedded):
    srv = start_server(*embedded, max_sessions=4, api_key=None)
    try:
        result = run_load(srv.base_url, clients=4, turns=5, max_tokens=8, observation_chars=600)
        health = httpx.get(srv.root + "/health").json()
        sessions = srv.engine.store.sessions
    finally:
        srv.stop()
    assert len(result["records"]) == 20  # run_load raised on any malformed reply
    by_client = {}
    for r in result["records"]:
        by_client.setdefault(r["client"], set()).add(r["session_id"])
    assert all(len(ids) == 1 for ids in by_client.values()) and len(set.union(*by_client.values())) == 4
    for s in sessions.values():  # no message of one client in another's transcript
        owners = {c for c in range(4) for role, text in s.transcript if role == "user" and marker(c) in text}
        assert len(owners) == 1, (s.id, owners)
    assert health["live_sessions"] == 4 and health["cache_bytes"] <= health["cache_bytes_bound"]
    assert result["rebuilds"] == 0  # interleaved requests each continued their own stream
    for r in result["records"]:  # every turn after the first fed only its new messages
        assert (r["cached_tokens"] > 0) == (r["turn"] > 0)
    assert all(r["tokens_stored"] <= 256 + 64 for r in result["records"])
