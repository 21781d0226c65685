"""mini-swe-agent trajectories: `solve --trajectory-format mini-swe-agent` writes one beside ours, it converts back
to ours whole, and `nexus inspect` reads it and mini-swe-agent's own files."""

from __future__ import annotations

import json

import pytest

from nexus.agent.mini_trajectory import MINI_FORMAT, from_mini, load_any, mini_path, to_mini
from nexus.agent.trajectory import load
from nexus.errors import NexusError

from .conftest import SOLVING_SCRIPT
from tests.conftest import LOCAL

SAME = ("task", "config", "exit_status", "error", "totals", "events", "runs", "steps", "messages", "patch")


def test_solve_writes_a_mini_trajectory_that_converts_back_and_inspects(calc_repo, write_script, cli, tmp_path):
    out = tmp_path / "run"
    r = cli("solve", "--repo", calc_repo.path, "--issue", "add() returns a-b; make the tests pass",
            "--model", f"scripted:{write_script(SOLVING_SCRIPT)}", "--sandbox", LOCAL, "-o", out,
            "--trajectory-format", "mini-swe-agent")
    assert r.returncode == 0, r.stderr + r.stdout
    ours = load(out)
    mini = json.loads(mini_path(out).read_text())
    assert mini_path(out).name == "run.traj.json"
    assert mini["trajectory_format"] == MINI_FORMAT
    assert mini["info"]["exit_status"] == "Submitted"
    assert mini["info"]["submission"] == (out / "patch.diff").read_text() and "+    return a + b" in ours["patch"]
    assert mini["info"]["model_stats"] == {"instance_cost": 0.0, "api_calls": 5}
    assert [m["role"] for m in mini["messages"]][-1] == "exit"
    commands = [a["command"] for m in mini["messages"] for a in (m.get("extra") or {}).get("actions", [])]
    assert "nexus-file view calculator/ops.py 1 8" in commands[0]

    back = from_mini(mini)
    assert {k: back[k] for k in SAME} == {k: ours.get(k) for k in SAME}

    shown = cli("inspect", mini_path(out))
    assert shown.returncode == 0, shown.stderr
    assert "mini-swe-agent-1.1 trajectory" in shown.stdout and "submitted" in shown.stdout
    assert "nexus-file str_replace calculator/ops.py" in shown.stdout and "+    return a + b" in shown.stdout


def _traj(steps, messages, exit_status="format_errors", patch=""):
    return {"format": "nexus-trajectory/1", "task": {"model": "embedded", "issue": "fix it", "issue_source": "text"},
            "config": {"protocol": "stream"}, "exit_status": exit_status, "error": None, "started": "s",
            "updated": "u", "totals": {"steps": len(steps), "generated_tokens": 9}, "events": [], "runs": [],
            "steps": steps, "messages": messages, "patch": patch}


def test_format_errors_rejections_and_an_unfinished_reply_survive_the_round_trip():
    steps = [
        {"step": 1, "source": "model", "response": "no block", "action": None, "format_error": "no block",
         "observation": "Reply with one block.", "stats": {"tokens_seen": 40}},
        {"step": 2, "source": "model", "response": "```bash\nrm -rf x\n```", "action": "rm -rf x", "rejected": True,
         "comment": "no", "observation": "The user rejected it.", "stats": None},
        {"step": 3, "source": "model", "response": "```bash\nsubmit\n```", "action": "submit", "observation": None},
    ]
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "no block"}, {"role": "user", "content": "Reply with one block."},
                {"role": "assistant", "content": "```bash\nrm -rf x\n```"},
                {"role": "user", "content": "The user rejected it."},
                {"role": "assistant", "content": "```bash\nsubmit\n```"},
                {"role": "user", "content": "a second task, typed at the REPL"}]
    traj = _traj(steps, messages, exit_status="submitted")
    mini = to_mini(traj)
    assert mini["messages"][3]["extra"] == {"interrupt_type": "FormatError"}
    assert mini["messages"][2]["extra"]["actions"] == [] and mini["messages"][4]["extra"]["actions"] == [
        {"command": "rm -rf x"}]
    assert "extra" not in mini["messages"][7]  # a new task, not the submit step's observation
    back = from_mini(mini)
    assert {k: back[k] for k in SAME} == {k: traj[k] for k in SAME}


def _mini_swe_agent_run(tmp_path):
    """A trajectory written by mini-swe-agent itself: its agent loop, a scripted model, a local shell."""
    agents = pytest.importorskip("minisweagent.agents.default")
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    outputs = [make_output("Look first.\n```mswea_bash_command\nls\n```", [{"command": "echo hello"}]),
               make_output("Done.", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the-patch"}])]
    path = tmp_path / "inst-1" / "inst-1.traj.json"
    agent = agents.DefaultAgent(DeterministicModel(outputs=outputs), LocalEnvironment(cwd=str(tmp_path)),
                                system_template="You are a helpful assistant.", instance_template="Task: {{task}}",
                                output_path=path)
    agent.run("say hello")
    return path


def test_inspect_reads_a_trajectory_mini_swe_agent_wrote(tmp_path, cli):
    path = _mini_swe_agent_run(tmp_path)
    traj = load_any(path.parent)  # a run directory holding one .traj.json
    assert traj["exit_status"] == "Submitted" and traj["patch"].strip() == "the-patch"
    assert [s["action"] for s in traj["steps"]] == ["echo hello",
                                                    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the-patch"]
    assert traj["steps"][0]["returncode"] == 0 and "hello" in traj["steps"][0]["observation"]
    assert traj["task"]["issue"] == "Task: say hello" and traj["totals"]["api_calls"] == 2
    shown = cli("inspect", path)
    assert shown.returncode == 0, shown.stderr
    assert "$ echo hello" in shown.stdout and "Submitted" in shown.stdout and "2 model calls" in shown.stdout


def test_a_mini_file_with_the_wrong_shape_and_an_unknown_format_are_one_sentence(tmp_path, cli):
    bad = tmp_path / "bad.traj.json"
    bad.write_text(json.dumps({"trajectory_format": MINI_FORMAT, "messages": {"not": "a list"}}))
    with pytest.raises(NexusError, match="wrong shape"):
        load_any(bad)
    r = cli("solve", "--repo", ".", "--issue", "x", "--trajectory-format", "swe-agent")
    assert r.returncode == 2
    assert "unknown trajectory format 'swe-agent'; use one of: nexus, mini-swe-agent." in r.stderr


def test_tool_call_replies_and_content_parts_read_as_steps():
    mini = {"trajectory_format": MINI_FORMAT, "info": {"exit_status": "LimitsExceeded", "submission": ""},
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "sys"}]},
                {"role": "user", "content": "Task: fix"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}, {"id": "c2"}],
                 "extra": {"actions": [{"command": "ls", "tool_call_id": "c1"},
                                       {"command": "pwd", "tool_call_id": "c2"}]}},
                {"role": "tool", "content": "a.py", "extra": {"returncode": 0}},
                {"role": "tool", "content": "/repo", "extra": {"returncode": 0}},
                {"role": "exit", "content": "LimitsExceeded", "extra": {"exit_status": "LimitsExceeded"}}]}
    traj = from_mini(mini)
    assert traj["exit_status"] == "LimitsExceeded" and traj["messages"][0]["content"] == "sys"
    [step] = traj["steps"]
    assert step["action"] == "ls\npwd" and step["observation"] == "a.py\n/repo" and step["response"] == ""
