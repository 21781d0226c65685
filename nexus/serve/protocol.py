"""OpenAI chat-completions requests, parsed and checked: every refusal is an ApiError with one sentence."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

# The chat roles the stream's template renderer knows; "developer" is OpenAI's newer name for "system".
ROLE_ALIASES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
SESSION_FIELDS = ("prompt_cache_key", "session_id", "user")  # body fields that name a conversation, in order


class ApiError(Exception):
    """An OpenAI-style error: HTTP status, one sentence, the offending parameter and a machine code."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


Message = tuple[str, str]  # (role, text): what a conversation is compared on, whatever else a client adds


@dataclass
class ChatRequest:
    messages: list[Message]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    session_key: str | None = None


def _text(content, index: int) -> str:
    """A message's text: a string, or OpenAI's list of parts of which only text parts are accepted."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{index}].content has a part that is not text; this server takes "
                                    "text only.", param=f"messages[{index}].content")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts.",
                   param=f"messages[{index}].content")


def _messages(raw) -> list[Message]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects.", param="messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}] must be an object with 'role' and 'content'.", param=f"messages[{i}]")
        role = m.get("role")
        if role not in ROLE_ALIASES:
            raise ApiError(400, f"messages[{i}].role {role!r} is not one of {', '.join(ROLE_ALIASES)}.",
                           param=f"messages[{i}].role")
        if m.get("tool_calls") or m.get("function_call"):
            raise ApiError(400, f"messages[{i}] carries tool calls; this server does not do tool calling, so "
                                "drive it with a text-based agent (e.g. mini-swe-agent's litellm_textbased model).",
                           param=f"messages[{i}].tool_calls")
        content = m.get("content")
        out.append((ROLE_ALIASES[role], "" if content is None else _text(content, i)))
    return out


def _number(body: dict, name: str, default, lo: float, hi: float, integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ApiError(400, f"'{name}' must be {'an integer' if integer else 'a number'}, got {value!r}.", param=name)
    if not lo <= value <= hi:
        raise ApiError(400, f"'{name}' must be between {lo} and {hi}, got {value}.", param=name)
    return value


def parse_chat_request(body, served_model: str, default_max_tokens: int, header_session: str | None) -> ChatRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if model != served_model:
        raise ApiError(404, f"The model {model!r} is not served here; use {served_model!r} (see GET /v1/models).",
                       param="model", code="model_not_found")
    if body.get("tools") or body.get("functions") or body.get("tool_choice") not in (None, "none"):
        raise ApiError(400, "Tool calling is not supported; drive this server with a text-based agent "
                            "(e.g. mini-swe-agent's litellm_textbased model).", param="tools")
    if _number(body, "n", 1, 1, 128, integer=True) != 1:
        raise ApiError(400, "Only n=1 is supported: one conversation has one stream.", param="n")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise ApiError(400, "logprobs are not supported by this server.", param="logprobs")
    for name in ("presence_penalty", "frequency_penalty"):
        if _number(body, name, 0, -2, 2) != 0:
            raise ApiError(400, f"'{name}' is not supported; leave it at 0.", param=name)
    if body.get("logit_bias"):
        raise ApiError(400, "'logit_bias' is not supported.", param="logit_bias")
    fmt = body.get("response_format")
    if fmt not in (None, {"type": "text"}):
        raise ApiError(400, "Only text responses are supported ('response_format' must be absent or text).",
                       param="response_format")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", default_max_tokens, 1, 1 << 20, integer=True)
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
                             or len(stop) > 4):
        raise ApiError(400, "'stop' must be a non-empty string or a list of up to 4 non-empty strings.", param="stop")
    options = body.get("stream_options") or {}
    key = header_session
    for name in SESSION_FIELDS:
        if key is None and isinstance(body.get(name), str) and body[name]:
            key = body[name]
    temperature = float(_number(body, "temperature", 1.0, 0, 2))
    top_p = float(_number(body, "top_p", 1.0, 0, 1))
    if top_p == 0:  # an empty nucleus keeps only the most likely token: greedy
        temperature, top_p = 0.0, 1.0
    return ChatRequest(
        messages=_messages(body.get("messages")),
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=_number(body, "seed", None, -(2**63), 2**63 - 1, integer=True),
        stop=list(stop or []),
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        session_key=key,
    )


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())
