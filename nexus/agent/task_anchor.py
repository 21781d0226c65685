"""The task anchor an agent's stream gets by default: nexus scores every eviction event with the task message's
queries too (anchor_start / anchor_tokens, docs/policies.md), so what the task asks about is flagged at every event.
Measured on the traces suite (benchmarks/nexus_agent_anchor.py, docs/results.md "The task anchor in an agent's
stream"): next-action KL at 20% -0.062 [-0.085, -0.040] nats/token against plain nexus on the five test sessions,
-0.024 [-0.033, -0.016] against nexus given the anchor's memory as KV; on a 229-token issue the first 64 tokens
-0.064 [-0.085, -0.039] and the whole message -0.057 [-0.084, -0.025] (stage 2, ten sessions)."""

from __future__ import annotations

from typing import Any

from nexus.runtime.chat import ChatRenderer

# The anchor's first tokens of the task message at most: the message header and the opening (usually its
# title). On a 229-token issue the cut anchor did as well as the whole one, at a quarter of the memory. The
# recorded queries take A x Hq / (2 x Hkv) tokens' worth of KV memory beside the cache (96 on the embedded model),
# reported as stats.anchor_bytes.
MAX_ANCHOR_TOKENS = 64
ANCHOR_KNOBS = ("anchor_tokens", "anchor_start", "anchor_reask")


def task_span(tokenizer, messages: list[dict]) -> tuple[int, int]:
    """(offset, length) in tokens of the task message (messages[1]) in a stream that takes messages[0] first, as
    the stream's chat rendering feeds them."""
    chat = ChatRenderer(tokenizer)

    def tokens(message: dict) -> int:
        return len(tokenizer.encode(chat.add(message["role"], message["content"]), add_special_tokens=False))

    start = tokens(messages[0])
    return start, tokens(messages[1])


def task_anchor_params(policy: str, params: dict[str, Any], tokenizer, messages: list[dict]) -> dict[str, Any]:
    """The anchor knobs for a transcript that opens with a system prompt and the task message: the task's offset
    and length in the stream's tokens (as the stream's chat rendering feeds them), or {} when the policy is not
    nexus, when the caller set an anchor knob (theirs wins; -p anchor_tokens=0 turns it off), or when the transcript
    does not open that way."""
    if policy != "nexus" or any(k in params for k in ANCHOR_KNOBS) or len(messages) < 2:
        return {}
    if messages[0]["role"] != "system" or messages[1]["role"] != "user":
        return {}
    start, length = task_span(tokenizer, messages)
    return {"anchor_start": start, "anchor_tokens": min(length, MAX_ANCHOR_TOKENS)}
