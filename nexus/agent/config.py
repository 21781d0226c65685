"""Agent configuration: limits, cache protocol and generation settings, one dataclass."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from nexus.errors import NexusError

PROTOCOLS = ("stream", "reprefill")


def reply_prefix_from_cli(text: str) -> str:
    """A --reply-prefix as typed on a command line: a literal backslash-n stands for a newline."""
    return text.replace("\\n", "\n")


@dataclass
class Limits:
    """When the loop stops on its own. Any of them ends the task with the patch extracted."""

    max_steps: int = 30
    max_generated_tokens: int = 20_000
    max_wall_seconds: float = 1800.0
    command_timeout: float = 60.0
    max_format_errors: int = 3  # in a row


@dataclass
class AgentConfig:
    limits: Limits = field(default_factory=Limits)
    protocol: str = "stream"  # "stream": one cache for the task; "reprefill": rebuild from the transcript each turn
    max_new_tokens: int = 384
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_observation_chars: int = 6000  # head+tail kept; eviction bounds what remains in the cache
    mode: str = "auto"  # "auto" (solve), "confirm" | "yolo" | "human" (repl)
    reply_prefix: str = ""  # local model only: every reply starts with this (e.g. "```bash\n" for tiny models)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise NexusError(f"unknown cache protocol {self.protocol!r}; use one of: {', '.join(PROTOCOLS)}.")
        lim = self.limits
        if lim.max_steps < 1 or lim.max_generated_tokens < 1 or lim.max_wall_seconds <= 0 or lim.command_timeout <= 0:
            raise NexusError("limits must be positive (steps, tokens, wall time and command timeout).")
        if self.max_new_tokens < 1:
            raise NexusError("--max-new-tokens must be at least 1.")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AgentConfig":
        data = dict(data)
        limits = Limits(**data.pop("limits", {}))
        return cls(limits=limits, **data)
