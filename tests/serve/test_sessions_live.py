"""Session keying, rebuilds, the memory bound, deletes, cancelled decodes and the position limit, over HTTP."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.serve.conftest import start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv(embedded):
    server = start_server(*embedded, max_sessions=2, api_key=None)
    yield server
    server.stop()


def chat(srv, messages, headers=None, **body):
    r = httpx.post(srv.base_url + "/chat/completions", timeout=120, headers=headers or {},
                   json={"model": "embedded", "messages": messages, "max_tokens": 6, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


def user(text):
    return {"role": "user", "content": text}


def turn(messages, reply):
    return [*messages, {"role": "assistant", "content": reply["choices"][0]["message"]["content"]}]


def test_explicit_keys_keep_identical_conversations_apart(srv):
    msgs = [user("Say hello.")]
    a = chat(srv, msgs, headers={"X-Session-Id": "alpha"})
    b = chat(srv, msgs, prompt_cache_key="beta")
    assert (a["nexus"]["session_id"], b["nexus"]["session_id"]) == ("alpha", "beta")
    a2 = chat(srv, turn(msgs, a) + [user("Again.")], headers={"X-Session-Id": "alpha"})
    assert a2["nexus"]["rebuilt"] is None and a2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_a_rewritten_history_rebuilds_the_stream_and_says_so(srv):
    msgs = [user("Tell me about owls.")]
    r1 = chat(srv, msgs)
    sid = r1["nexus"]["session_id"]
    msgs = turn(msgs, r1) + [user("And about cats?")]
    r2 = chat(srv, msgs)
    assert r2["nexus"]["session_id"] == sid and r2["nexus"]["rebuilt"] is None
    # an agent's history processor shortens an old turn: the reply this server wrote before it is still there,
    # so it is the same conversation, rebuilt from the new transcript
    edited = [*msgs[:2], user("And cats?")]
    r3 = chat(srv, turn(edited, r2) + [user("Now dogs.")])
    assert r3["nexus"]["session_id"] == sid and r3["nexus"]["rebuilt"] == "history rewritten"
    assert r3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_memory_is_bounded_by_dropping_the_least_recent_stream(srv):
    first = [user("Conversation one: what is rain?")]
    r1 = chat(srv, first, session_id="one")
    for name in ("two", "three"):  # max_sessions=2: the third live stream drops the least recently used
        chat(srv, [user(f"Conversation {name}: what is snow?")], session_id=name)
    health = httpx.get(srv.root + "/health").json()
    assert health["live_sessions"] <= 2 and health["cache_bytes"] <= health["cache_bytes_bound"]
    sessions = {s["id"]: s for s in httpx.get(srv.base_url + "/sessions").json()["data"]}
    assert sessions["one"]["live"] is False and sessions["one"]["messages"] == 2  # transcript kept
    back = chat(srv, turn(first, r1) + [user("And hail?")], session_id="one")
    assert back["nexus"]["rebuilt"] == "dropped to bound memory"
    assert httpx.delete(srv.base_url + "/sessions/one").json()["deleted"] is True
    gone = httpx.delete(srv.base_url + "/sessions/one")
    assert gone.status_code == 404 and "No session" in gone.json()["error"]["message"]


def test_a_client_that_goes_away_stops_the_decode(srv):
    msgs = [user("Write a very long story about a dragon.")]
    body = {"model": "embedded", "messages": msgs, "max_tokens": 400, "temperature": 0, "stream": True,
            "session_id": "leaver"}
    with httpx.stream("POST", srv.base_url + "/chat/completions", json=body, timeout=120) as r:
        for n, _ in enumerate(r.iter_lines()):
            if n >= 6:
                break
    deadline = time.monotonic() + 30
    while httpx.get(srv.root + "/health").json()["queued"] or _decoding(srv):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    stats = srv.engine.store.sessions["leaver"].stream.stats
    assert stats.decode_tokens < 100  # stopped well before max_tokens
    again = chat(srv, msgs, session_id="leaver")
    assert again["nexus"]["rebuilt"] == "the previous reply was cut short"


def _decoding(srv) -> bool:
    # the worker answers this only after the cancelled decode returned
    return not srv.engine.call(lambda: True).result(timeout=30)


def test_a_stream_ends_at_the_models_positions(srv):
    old = srv.engine.max_positions
    srv.engine.max_positions = 40  # the embedded model has 8192: too long to reach in a test
    try:
        r = httpx.post(srv.base_url + "/chat/completions", timeout=60, json={
            "model": "embedded", "messages": [user("word " * 60)], "session_id": "long"})
    finally:
        srv.engine.max_positions = old
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "context_length_exceeded" and "positions" in err["message"]
    assert "long" not in srv.engine.store.sessions
