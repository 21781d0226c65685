"""Incremental chat-template rendering: each message yields only the text the template adds for it.

The stream must never re-feed what it already holds, so instead of rendering the whole conversation each turn we
render before and after adding a message and feed the difference.
"""

from __future__ import annotations

from nexus.errors import NexusError

ROLES = ("system", "user", "assistant", "tool")


class ChatRenderer:
    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise NexusError("This tokenizer has no chat template; append raw text with stream.append(text) instead.")
        self.tokenizer = tokenizer
        self.messages: list[dict] = []

    def reset(self) -> None:
        self.messages = []

    def _render(self, messages: list[dict], generation_prompt: bool = False) -> str:
        if not messages:
            return ""
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _delta(self, before: str, after: str) -> str:
        if not after.startswith(before):
            raise NexusError(
                "The model's chat template re-renders earlier messages differently when a message is added, so it "
                "cannot be streamed incrementally; append raw text with stream.append(text) instead."
            )
        return after[len(before) :]

    def add(self, role: str, content: str) -> str:
        """Record a message and return the text the template adds for it."""
        if role not in ROLES:
            raise NexusError(f"Unknown chat role {role!r}; use one of {', '.join(ROLES)}.")
        if not isinstance(content, str):
            raise NexusError(f"Message content must be text, got {type(content).__name__}.")
        message = {"role": role, "content": content}
        delta = self._delta(self._render(self.messages), self._render([*self.messages, message]))
        self.messages.append(message)  # only once the template accepted it: a failed add changes nothing
        return delta

    def generation_prompt(self) -> str:
        """The text that opens an assistant turn (e.g. "<|im_start|>assistant\\n")."""
        return self._delta(self._render(self.messages), self._render(self.messages, generation_prompt=True))

    def close_assistant(self, generated: str, ended_by_eos: bool) -> str:
        """Record the assistant reply; return what must still be fed to end the turn as the template would.

        `generated` is what was decoded into the stream (without the end-of-turn token when ended_by_eos).
        """
        opened = self._render(self.messages, generation_prompt=True)
        self.messages.append({"role": "assistant", "content": generated})
        turn = self._delta(opened, self._render(self.messages)) if self.messages[:-1] else ""
        if not turn.startswith(generated):
            # The template transformed the content (e.g. stripped it); feed only its end-of-turn marker.
            stripped = generated.strip()
            idx = turn.rfind(stripped) if stripped else -1
            tail = turn[idx + len(stripped) :] if idx >= 0 else turn
        else:
            tail = turn[len(generated) :]
        if ended_by_eos:
            eos = self.tokenizer.eos_token or ""
            tail = tail[len(eos) :] if eos and tail.startswith(eos) else tail
        return tail
