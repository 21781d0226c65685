"""Item generators: real texts, seeded, and needles where the question can only be answered from the text."""

from __future__ import annotations

import random
import re

from nexus.evals.kv.config import size_for
from nexus.evals.kv.corpus import make_repo, pytest_command, run_command, source_documents, transcript_commands
from nexus.evals.kv.retrieval import TASKS, RetrievalSuite, make_task


def test_source_documents_are_real_package_files():
    docs = source_documents(seed=0, count=2)
    assert len(docs) == 2 and all(d.text.startswith("# file: ") for d in docs)
    assert docs[0].text == source_documents(seed=0, count=2)[0].text
    assert "def " in docs[0].text or "class " in docs[0].text


def test_repo_commands_really_run_and_are_normalised(tmp_path):
    repo = make_repo(tmp_path, "typer", seed=0)
    rc, out = run_command(repo, pytest_command())
    assert rc == 1 and "4 passed" in out and "1 failed" in out and "ZeroDivisionError" in out
    assert str(tmp_path) not in out and "in 0.01s" in out
    rc, log = run_command(repo, "git log -p")
    assert rc == 0 and log.count("\ncommit ") + log.startswith("commit ") == 3 and "diff --git" in log
    assert "$" not in transcript_commands(repo)[0]
    again = make_repo(tmp_path / "again", "typer", seed=0)
    assert run_command(again, "git log -p")[1] == log  # fixed dates and authors: same history, same hashes


def test_tasks_hide_the_bridge_link_from_the_question():
    rng = random.Random(0)
    for kind in TASKS:
        needles, question, prefix, answer = make_task(kind, rng)
        text = "\n".join(needles)
        assert answer in text and answer not in question
    needles, question, _, _ = make_task("bridge", random.Random(1))
    middle = needles[0].split("the file ")[1].rstrip(".")
    assert middle not in question and middle in needles[1]


def test_retrieval_items_are_seeded_and_hold_their_needles(tokenizer):
    size = size_for("retrieval", "ci", items=2, context_tokens=600, max_context_tokens=900)
    suite = RetrievalSuite()
    a = suite.build_items(size, tokenizer, seed=0)
    b = suite.build_items(size, tokenizer, seed=0)
    c = suite.build_items(size, tokenizer, seed=1)
    assert [i.data for i in a] == [i.data for i in b] and [i.data for i in a] != [i.data for i in c]
    assert [i.data["haystack_tokens"] for i in a] == [600, 900]
    for item in a:
        haystack = tokenizer.decode(item.data["haystack"])
        assert [q["task"] for q in item.data["questions"]] == list(TASKS)
        for q in item.data["questions"]:
            assert q["answer"] in haystack and q["answer"] not in tokenizer.decode(q["question"])
        assert len({q["answer"] for q in item.data["questions"]}) == len(TASKS)
        assert haystack.count("# Note:") + haystack.count("# VAR") == 1 + 3 + 2 + 2
        # keys share no word within an item (the 135M model confuses keys that do)
        keys = re.findall(r"(?:for|of|service|file) ([a-z]+-[a-z]+)\b", haystack)
        words = [w for k in dict.fromkeys(keys) for w in k.split("-")]
        assert len(keys) >= 1 + 3 + 2 and len(words) == len(set(words)), keys


def test_retrieval_prompts_end_where_the_needle_value_starts():
    """The answer prefix repeats the needle's words up to the value (single, multikey), so the model can copy."""
    rng = random.Random(3)
    for kind in ("single", "multikey"):
        needles, _, prefix, answer = make_task(kind, rng)
        assert any(f"{prefix} {answer}." in line for line in needles)


def test_recorded_traces_use_the_agents_own_messages(tmp_path):
    """The replayed conversation is what `nexus solve` would put in the stream: same system prompt, task message and
    observation layout (output, a blank line, [exit code N]), observations as user turns."""
    from nexus.agent import prompts
    from nexus.evals.kv.traces import ISSUE, record_trajectory

    messages = record_trajectory(tmp_path, "typer", seed=0, output_chars=800)
    assert messages[0] == {"role": "system", "content": prompts.SYSTEM}
    assert messages[1] == {"role": "user", "content": prompts.TASK.format(issue=ISSUE)}
    assert messages[-1]["role"] == "assistant" and messages[-1]["content"].endswith("```bash\nsubmit\n```")
    observations = [m["content"] for m in messages[2:] if m["role"] != "assistant"]
    assert all(m["role"] in ("user", "assistant") for m in messages[1:])
    assert len(observations) == 8 and all(o.startswith("Output:\n") for o in observations)
    first_pytest = observations[1]
    assert first_pytest.endswith("\n\n[exit code 1]") and "1 failed" in first_pytest
    assert observations[-1].endswith("\n\n[exit code 0]") and "5 passed" in observations[-1]
    assert any("omitted from the middle of this output" in o for o in observations)  # the agent's truncation note


def test_a_recorded_trace_takes_the_issue_it_is_given(tmp_path):
    """benchmarks/nexus_agent_anchor.py's long-issue stage words the task differently; the scripted fix is the same."""
    from nexus.agent import prompts
    from nexus.evals.kv.traces import record_trajectory

    messages = record_trajectory(tmp_path, "typer", seed=0, output_chars=800, issue="mean() crashes on []")
    assert messages[1] == {"role": "user", "content": prompts.TASK.format(issue="mean() crashes on []")}
    assert "5 passed" in messages[-2]["content"]  # the last observation: the fix made the tests pass
