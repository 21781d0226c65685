"""The official `openai` package against a live server: replies, streaming, stops, errors, a long conversation."""

from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import BUDGET

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")

SYSTEM = {"role": "system", "content": "You are a terse assistant."}


def ask(client, messages, **kw):
    kw = {"max_tokens": 12, "temperature": 0, **kw}
    return client.chat.completions.create(model="embedded", messages=messages, **kw)


def test_reply_and_its_stream_are_the_same_text(client):
    messages = [SYSTEM, {"role": "user", "content": "Name a colour of the sky."}]
    whole = ask(client, messages)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > whole.usage.completion_tokens
    chunks = list(ask(client, messages, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # both ran greedy from a fresh stream (the two requests are two conversations: neither extends the other)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_stop_sequences_end_the_reply_and_are_not_returned(client):
    messages = [SYSTEM, {"role": "user", "content": "Count from one to ten in words."}]
    free = ask(client, messages, max_tokens=24).choices[0].message.content
    words = free.split(" ")
    assert len(words) >= 4, free
    stop = " " + words[2]  # occurs in the greedy reply, spans characters that arrive in several tokens
    for stream in (False, True):
        if stream:
            chunks = list(ask(client, messages, max_tokens=24, stop=["@@never", stop], stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            r = ask(client, messages, max_tokens=24, stop=stop)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert text == free[: free.find(stop)] and finish == "stop"


def test_errors_are_the_packages_exception_types(client, server):
    messages = [SYSTEM, {"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="n=1"):
        ask(client, messages, n=2)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=messages)
    with pytest.raises(openai.BadRequestError, match="messages"):
        ask(client, [])
    with pytest.raises(openai.BadRequestError, match="role 'wizard'"):
        ask(client, [{"role": "wizard", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="Tool calling"):
        ask(client, messages, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    wrong = openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="API key"):
        ask(wrong, messages)
    bad_json = httpx.post(server.base_url + "/chat/completions", content=b"{nope",
                          headers={"Authorization": f"Bearer {server.api_key}"})
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    assert [m.id for m in client.models.list()] == ["embedded"]


def test_ten_turns_prefill_each_message_once(client, server):
    messages = [SYSTEM]
    seen_after = None
    session = None
    for turn in range(10):
        messages.append({"role": "user", "content": f"Turn {turn}: tell me one fact about the number {turn}."})
        r = ask(client, messages, max_tokens=10)
        nexus = r.model_extra["nexus"]
        session = session or nexus["session_id"]
        assert nexus["session_id"] == session and nexus["rebuilt"] is None
        cached = r.usage.prompt_tokens_details.cached_tokens
        # everything the stream held before this request (prompt, replies, end-of-turn tokens) was not fed again
        assert cached == (0 if turn == 0 else seen_after)
        seen_after = nexus["stats"]["tokens_seen"]
        assert nexus["stats"]["tokens_stored"] <= BUDGET + 64
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
    info = httpx.get(f"{server.base_url}/sessions/{session}",
                     headers={"Authorization": f"Bearer {server.api_key}"}).json()
    assert info["rebuilds"] == 0 and info["turns"] == 10
    assert info["tokens_seen"] == seen_after > BUDGET and info["eviction_events"] > 0
    assert info["tokens_stored"] <= BUDGET + 64
