"""What the model reads: the system prompt, the task message, observations and corrective messages.

Kept short on purpose: every token of it stays in the bounded cache for the whole task.
"""

from __future__ import annotations

SYSTEM = """You are a coding agent. You work in a git repository by running shell commands in it. Commands start in
the repository's top directory: use relative paths.

Rules:
- Every reply has a short thought and then exactly ONE fenced bash block with the command to run, like:

```bash
ls
```

- You see the command's output in the next message. Long outputs are cut in the middle.
- Edit files with the nexus-file tool:
  nexus-file view PATH [START END]      show lines with numbers
  nexus-file create PATH <<'EOF'        create or overwrite a file with the text up to EOF
  nexus-file str_replace PATH <<'EOF'   replace exact text: the old text, a line =======, the new text
  nexus-file insert PATH LINE <<'EOF'   insert text after line LINE (0 = at the top)
  nexus-file undo PATH                  undo the last nexus-file edit of PATH
- Run the tests to check your change.
- When the task is done, reply with a block that holds only the command: submit"""

TASK = """Task in this repository:

{issue}

Start by running ls to list the files."""

FORMAT_ERROR = """Format error: {error}. Reply with a short thought and exactly one fenced bash block that holds
the command, for example:

```bash
ls
```

To finish, put only `submit` in the block."""

# Output first, exit code last: with the code first, the 135M model copies it back as its next command ("exit 0").
# A blank line between the output and the code: without it the 135M demo model writes code instead of commands.
OBSERVATION = """Output:
{output}

[exit code {returncode}{flags}]"""

REJECTED = "The user did not run that command.{comment} Propose another command."

INTERRUPTED = "The user interrupted the last step (its command, if any, was stopped). Their comment: {comment}"


def truncate_middle(text: str, limit: int) -> tuple[str, bool]:
    """Keep the head and the tail of a long output and say, in the text, what was cut and how to see it."""
    if limit <= 0 or len(text) <= limit:
        return text, False
    head = limit * 2 // 3
    tail = limit - head
    cut = text[head : len(text) - tail]
    note = (
        f"\n[... {len(cut)} characters ({cut.count(chr(10))} lines) omitted from the middle of this output;"
        " use head, tail, grep or nexus-file view PATH START END to see a part ...]\n"
    )
    return text[:head] + note + text[len(text) - tail :], True


def observation(output: str, returncode: int, timed_out: bool, truncated: bool, limit: int) -> tuple[str, bool]:
    """The message that answers a command. Returns (text, whether the agent cut it)."""
    body, cut = truncate_middle(output, limit)
    flags = ""
    if timed_out:
        flags += " (the command timed out and was killed)"
    if truncated and not cut:
        flags += " (output capped by the sandbox)"
    body = body.rstrip("\n")  # one blank line before the exit code, whether or not the output ended in a newline
    if not body.strip():
        body = "(no output)"
    return OBSERVATION.format(returncode=returncode, flags=flags, output=body), cut
