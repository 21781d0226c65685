"""The text action protocol: exactly one fenced bash block per reply; `submit` alone in the block ends the task.

Any chat model can follow it (tiny ones too), and it needs no tool-calling support from the chat template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SUBMIT = "submit"

# A fence opens with ``` plus an optional shell-ish language tag and closes with ``` on its own line.
# Bare ``` blocks count: small models often drop the tag.
_BLOCK = re.compile(
    r"^[ \t]*```[ \t]*(?P<lang>bash|sh|shell|console|zsh)?[ \t]*\n(?P<body>.*?)^[ \t]*```[ \t]*$",
    re.MULTILINE | re.DOTALL | re.IGNORECASE,
)
_ANY_FENCE = re.compile(r"^[ \t]*```", re.MULTILINE)


@dataclass(frozen=True)
class Action:
    """What one reply asks for: a command to run, the end of the task, or a format error to correct."""

    kind: str  # "command" | "submit" | "format_error"
    command: str = ""
    error: str = ""

    @property
    def is_command(self) -> bool:
        return self.kind == "command"


def parse_action(text: str) -> Action:
    blocks = [m.group("body").strip("\n") for m in _BLOCK.finditer(text)]
    if len(blocks) == 1:
        command = blocks[0].strip()
        if not command:
            return Action("format_error", error="the bash block is empty")
        # `$ cmd` is how models often quote a shell session; the prompt char is not part of the command.
        if command.startswith("$ ") and "\n" not in command:
            command = command[2:].strip()
        if command == SUBMIT:
            return Action("submit", command=SUBMIT)
        if all(line.lstrip().startswith("#") for line in command.splitlines() if line.strip()):
            # Small models often "answer" with a comment; running it would teach them nothing.
            return Action("format_error", error="the bash block holds only comments, no command")
        return Action("command", command=command)
    if not blocks:
        if _ANY_FENCE.search(text):
            return Action("format_error", error="the code block is not a closed ```bash block")
        return Action("format_error", error="the reply has no ```bash block")
    return Action("format_error", error=f"the reply has {len(blocks)} bash blocks, not exactly one")
