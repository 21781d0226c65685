"""Suite 3, agent-trace replay: recorded agent trajectories replayed into a stream; at every action point the
policy's next-action distribution is compared with dense's.

Trajectories are either nexus trajectory files (`nexus solve` output, format nexus-trajectory/1) or recorded here:
a scripted session on a real git repository (corpus.make_repo) whose commands really run and whose outputs are
recorded. The recording uses the agent's own messages (nexus.agent.prompts: system prompt, task message,
observation layout, middle truncation), so the replay is what `nexus solve` would put in the stream.
At each action point (after the assistant turn opens) we record
- the greedy first line of the reply (on a fork, so the replay is not disturbed), and
- log-probs of the recorded reply's tokens (teacher forced; the replay then continues with the recorded reply),
so every policy replays exactly the same conversation. Points are scored where the stream holds more tokens than
the budget (before that every policy equals dense); the point, not the trace, is the unit of the intervals.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

from nexus.agent import prompts
from nexus.evals.kv.config import SuiteSize
from nexus.evals.kv.corpus import make_repo, package_sources, pytest_command, run_command, split_packages, split_seed
from nexus.evals.kv.probe import feed_scored, fork, kl_per_position
from nexus.evals.kv.suite import Item, Metric, QualitySuite
from nexus.errors import NexusError

TRAJECTORY_FORMAT = "nexus-trajectory/1"
SCORED_TOKENS = 48  # reply tokens scored per action point (thought + command fit in this)
FIRST_LINE_TOKENS = 12  # compared up to 12 tokens (the recorded thoughts are 8-16 tokens; CPU cost)

ISSUE = "The test test_mean_empty fails: mean([]) raises ZeroDivisionError. Make mean() of an empty list return 0."


def scripted_actions(repo: Path, rng: random.Random) -> list[tuple[str, str]]:
    srcs = sorted(p.name for p in (repo / "src").iterdir())
    looks = [("Let me read one of the vendored modules.", f"cat src/{name}") for name in srcs]
    rng.shuffle(looks)
    fix = ("python - <<'EOF'\nimport pathlib\np = pathlib.Path('mathutils.py')\n"
           "p.write_text(p.read_text().replace('    return sum(values) / len(values)',"
           " '    return sum(values) / len(values) if values else 0'))\nEOF")
    return [
        ("I will start by listing the files in the repository.", "ls -R"),
        ("Let me run the tests to see the failure.", pytest_command()),
        looks[0],
        ("The failure is in mathutils.py, so I will read it.", "cat mathutils.py"),
        ("Let me check the history of the repository.", "git log -p -n 2"),
        looks[1],
        ("mean divides by len(values); I will return 0 for an empty list.", fix),
        ("Now I will run the tests again.", pytest_command()),
        ("The tests pass, so I will submit.", "submit"),
    ]


def record_trajectory(root: Path, package: str, seed: int, output_chars: int, issue: str = ISSUE) -> list[dict]:
    """Run a scripted session for real and return its chat messages (the recorded trajectory); `issue` is the task
    it is given (the scripted actions fix ISSUE's bug whatever its wording)."""
    repo = make_repo(root, package, seed)
    rng = random.Random(f"trace-{package}-{seed}")
    messages = [{"role": "system", "content": prompts.SYSTEM},
                {"role": "user", "content": prompts.TASK.format(issue=issue)}]
    for thought, command in scripted_actions(repo, rng):
        messages.append({"role": "assistant", "content": f"{thought}\n\n```bash\n{command}\n```"})
        if command == "submit":
            break
        rc, output = run_command(repo, command)
        output = output.replace(pytest_command().split(" -m ")[0], "python")  # the venv path is noise
        text, _ = prompts.observation(output, rc, timed_out=False, truncated=False, limit=output_chars)
        messages.append({"role": "user", "content": text})
    return messages


def load_trajectories(path: Path) -> list[tuple[str, list[dict]]]:
    """Messages of every nexus trajectory under `path` (a trajectory.json or a directory searched recursively)."""
    files = [path] if path.is_file() else sorted(path.rglob("trajectory.json"))
    out = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NexusError(f"Cannot read trajectory {f} ({exc}); pass trajectory.json files written by nexus solve.")
        messages = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("format") != TRAJECTORY_FORMAT or not messages:
            raise NexusError(f"{f} is not a nexus trajectory with messages; pass files written by nexus solve.")
        out.append((f.parent.name, [{"role": m["role"], "content": m["content"]} for m in messages]))
    if not out:
        raise NexusError(f"No trajectory.json was found under {path}; pass a nexus solve output directory.")
    return out


class TracesSuite(QualitySuite):
    name = "traces"
    headline = "kl"
    metrics = (
        Metric("kl", "next-action KL(dense||policy) nats/token", "lower"),
        Metric("first_token_kl", "KL at the action point's first token", "lower"),
        Metric("same_first_line", "same first line as dense %", "higher", scale=100),
    )

    def __init__(self, trajectories: Path | None = None, issue: str = ISSUE):
        self.trajectories = trajectories
        self.issue = issue  # the scripted sessions' task text

    def build_items(self, size: SuiteSize, tokenizer, seed: int, split: str = "all") -> list[Item]:
        if self.trajectories is not None and split != "all":
            raise NexusError("--split does not apply to trajectories passed with --traces; leave it at all.")
        if self.trajectories is not None:
            traces = load_trajectories(self.trajectories)[: size.items]
        else:
            rng = random.Random(split_seed("traces", seed, split))
            names = [n for n in split_packages(split) if len(package_sources(n, 3000)) >= 3]
            rng.shuffle(names)
            with tempfile.TemporaryDirectory(prefix="nexus-kv-traces-") as tmp:
                traces = [(f"scripted-{n}", record_trajectory(Path(tmp), n, seed, size.context_tokens * 4,
                                                                 self.issue))
                          for n in names[: size.items]]
        items = []
        for i, (name, messages) in enumerate(traces):
            text = tokenizer.apply_chat_template(messages, tokenize=False)
            items.append(Item(id=f"trace-{i:03d}", context_tokens=len(tokenizer.encode(text, add_special_tokens=False)),
                              data={"source": name, "messages": messages}))
        return items

    def observe(self, stream, item: Item):
        points = []
        tok = stream.tokenizer
        for message in item.data["messages"]:
            if message["role"] != "assistant":
                stream.append_message(message["role"], message["content"])
                continue
            stream.append(stream.chat.generation_prompt())
            seen = stream.tokens_seen
            first = None
            if seen > stream.budget:  # only points past the budget are scored (see compare)
                probe = fork(stream)
                first = probe.generate(FIRST_LINE_TOKENS, stop=["\n"]).text.split("\n")[0].strip()
                del probe
            ids = tok.encode(message["content"], add_special_tokens=False)
            scored = feed_scored(stream, ids[:SCORED_TOKENS])[: min(len(ids), SCORED_TOKENS)]
            if len(ids) > SCORED_TOKENS:
                stream.append(ids[SCORED_TOKENS:])
            stream.append(stream.chat.close_assistant(message["content"], ended_by_eos=False))
            points.append({"seen": seen, "first_line": first, "logprobs": scored})
        return points

    def compare(self, item: Item, budget: int, ref, got) -> dict[str, list[float]]:
        kl, first_kl, same = [], [], []
        for r, g in zip(ref, got):
            if r["seen"] <= budget or r["first_line"] is None:  # nothing evicted yet: not informative
                continue
            per_token = kl_per_position(r["logprobs"], g["logprobs"])
            kl.append(float(per_token.mean()))
            first_kl.append(float(per_token[0]))
            same.append(float(r["first_line"] == g["first_line"]))
        return {"kl": kl, "first_token_kl": first_kl, "same_first_line": same}
