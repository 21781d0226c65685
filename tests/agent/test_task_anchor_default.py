"""The agent's nexus stream anchors its task message by default (nexus/agent/task_anchor.py): the span is where the
stream really feeds the task, the caller's own anchor knobs win, and other policies are left alone."""

from __future__ import annotations

import pytest

from nexus.agent import prompts
from nexus.agent.backends import local
from nexus.agent.backends.local import LocalBackend, StreamSpec
from nexus.agent.task_anchor import MAX_ANCHOR_TOKENS, task_anchor_params
from nexus.runtime import InferenceStream, make_policy


def opening(issue: str) -> list[dict]:
    return [{"role": "system", "content": prompts.SYSTEM.format(workdir="/repo")},
            {"role": "user", "content": prompts.TASK.format(workdir="/repo", issue=issue)}]


def test_the_span_is_where_the_stream_feeds_the_task_message(tiny_llama):
    model, tok = tiny_llama
    messages = opening("mean([]) raises ZeroDivisionError.")
    got = task_anchor_params("nexus", {}, tok, messages)
    stream = InferenceStream(model, tok, make_policy("dense"), budget=4096, chunk_size=64)
    stream.append_message(**messages[0])
    start = stream.tokens_seen
    stream.append_message(**messages[1])
    assert got == {"anchor_start": start, "anchor_tokens": stream.tokens_seen - start}
    assert 0 < got["anchor_tokens"] < MAX_ANCHOR_TOKENS


def test_a_long_issue_is_cut_and_the_callers_knobs_or_another_policy_get_nothing(tokenizer):
    messages = opening("word " * 500)
    assert task_anchor_params("nexus", {}, tokenizer, messages)["anchor_tokens"] == MAX_ANCHOR_TOKENS
    assert task_anchor_params("nexus", {"anchor_tokens": 0}, tokenizer, messages) == {}
    assert task_anchor_params("snapkv", {}, tokenizer, messages) == {}
    assert task_anchor_params("nexus", {}, tokenizer, messages[1:]) == {}  # no system prompt first: no known task


@pytest.mark.parametrize("policy, params, anchored", [("nexus", {}, True), ("nexus", {"anchor_tokens": 0}, False),
                                                      ("random", {}, False)])
def test_the_local_backend_anchors_a_nexus_stream_before_it_takes_the_task(tiny_llama, monkeypatch, policy, params,
                                                                          anchored):
    monkeypatch.setattr(local, "_MODELS", {("tiny", None, None): tiny_llama})
    backend = LocalBackend(StreamSpec(model="tiny", policy=policy, policy_params=params, budget=256, chunk_size=32),
                           max_new_tokens=4)
    messages = opening("mean([]) raises ZeroDivisionError.")
    backend.reply(messages)
    stream = backend.feeder.stream
    want = task_anchor_params("nexus", {}, tiny_llama[1], messages)
    if anchored:
        assert (stream.policy.anchor_start, stream.policy.anchor) == (want["anchor_start"], want["anchor_tokens"])
        assert stream.recorder.anchors[0].shape[1] == want["anchor_tokens"]
        assert backend.stats()["anchor_bytes"] > 0
    else:
        assert stream.policy.anchor == 0 and backend.stats()["anchor_bytes"] == 0
    assert backend.spec.policy_params == params  # the user's spec is unchanged (a REPL rebuild starts from it)
