"""Request parsing, stop-sequence holdback and session matching, without a model."""

from __future__ import annotations

import pytest

from nexus.serve.engine import StopHoldback
from nexus.serve.protocol import ApiError, parse_chat_request
from nexus.serve.sessions import SessionStore


def parse(**body):
    return parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}, "m", 32, None)


def test_parse_defaults_and_keys():
    r = parse()
    assert (r.max_tokens, r.temperature, r.top_p, r.stop, r.stream) == (32, 1.0, 1.0, [], False)
    assert parse(max_completion_tokens=5, stop="x", user="u1").max_tokens == 5
    assert parse(stop="x").stop == ["x"] and parse(user="u1").session_key == "u1"
    assert parse(prompt_cache_key="k", user="u").session_key == "k"
    assert parse(top_p=0).temperature == 0.0  # an empty nucleus is greedy
    parts = parse(messages=[{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                               {"type": "text", "text": "b"}]}])
    assert parts.messages == [("system", "ab")]


@pytest.mark.parametrize("body, status, words", [
    ({"n": 2}, 400, "n=1"), ({"model": "other"}, 404, "not served"), ({"messages": []}, 400, "non-empty"),
    ({"messages": [{"role": "bot", "content": "x"}]}, 400, "role 'bot'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "not text"),
    ({"max_tokens": 0}, 400, "max_tokens"), ({"temperature": "hot"}, 400, "temperature"),
    ({"stop": ["a", ""]}, 400, "stop"), ({"tools": [{"type": "function"}]}, 400, "Tool calling"),
    ({"logprobs": True}, 400, "logprobs"), ({"frequency_penalty": 1.0}, 400, "frequency_penalty"),
])
def test_parse_refusals_are_one_sentence(body, status, words):
    with pytest.raises(ApiError) as err:
        parse(**body)
    assert err.value.status == status and words in err.value.message and "\n" not in err.value.message


def test_holdback_never_streams_part_of_a_stop():
    sent = []
    h = StopHoldback(["END"], sent.append)
    for piece in ["he", "llo E", "N", "D tail"]:
        h.feed(piece)
    h.flush(h.cut(h.text))
    assert "".join(sent) == "hello " == h.cut(h.text)
    sent.clear()
    h = StopHoldback(["END"], sent.append)
    for piece in ["a E", "ND", "x"]:
        h.feed(piece)
    assert "".join(sent) == "a "


class FakeStream:
    """Stands in for an InferenceStream: records what was appended."""

    def __init__(self):
        self.fed, self.resets = [], 0

    @property
    def tokens_seen(self):
        return len(self.fed)

    def append_message(self, role, content):
        self.fed.append((role, content))

    def reset(self):
        self.fed, self.resets = [], self.resets + 1


def test_matching_extends_the_longest_transcript_and_never_steals_on_a_shared_system_prompt():
    store = SessionStore(FakeStream, max_sessions=4, ttl_seconds=60)
    sys_msg, u1 = ("system", "S"), ("user", "task one")
    a = store.resolve([sys_msg, u1], None)
    store.prepare(a, [sys_msg, u1])
    store.add_reply(a, "r1")
    other = store.resolve([sys_msg, ("user", "task two")], None)
    assert other is not a  # only the system prompt is shared: a different conversation
    cont = [sys_msg, u1, ("assistant", "r1"), ("user", "next")]
    assert store.resolve(cont, None) is a
    # only the new user message is fed (the fake does not decode, so the reply itself is not in it)
    assert store.prepare(a, cont) == (None, 2) and a.stream.fed == [sys_msg, u1, ("user", "next")]
    # a client-written assistant turn (few-shot) is not this server's reply: no partial match on it
    fewshot = store.resolve([sys_msg, ("user", "q"), ("assistant", "example")], None)
    store.prepare(fewshot, [sys_msg, ("user", "q"), ("assistant", "example")])
    assert store.resolve([sys_msg, ("user", "q"), ("assistant", "example2")], None) is not fewshot


def test_lru_drop_keeps_transcripts_and_ttl_forgets():
    clock = [0.0]
    store = SessionStore(FakeStream, max_sessions=2, ttl_seconds=10, clock=lambda: clock[0])
    sessions = []
    for i in range(3):
        clock[0] += 1
        s = store.resolve([("user", f"c{i}")], f"k{i}")
        store.prepare(s, [("user", f"c{i}")])
        sessions.append(s)
    assert [s.stream is None for s in sessions] == [True, False, False]
    assert sessions[0].transcript == [("user", "c0")]
    clock[0] += 20
    assert sorted(store.expire()) == ["k0", "k1", "k2"] and not store.sessions


def test_remembered_conversations_are_capped():
    from nexus.serve.sessions import TRANSCRIPTS_PER_STREAM

    store = SessionStore(FakeStream, max_sessions=1, ttl_seconds=60)
    for i in range(TRANSCRIPTS_PER_STREAM + 5):
        s = store.resolve([("user", f"c{i}")], None)
        store.prepare(s, [("user", f"c{i}")])
    assert len(store.sessions) == TRANSCRIPTS_PER_STREAM
    assert s.id in store.sessions and s.stream is not None  # the newest one is kept, and live
