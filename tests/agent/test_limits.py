"""Limits (steps, generated tokens, wall time, per-command timeout, format errors) end the task with the patch
extracted and the exit status recorded; long observations are cut head+tail."""

import time

from nexus.agent.backends.scripted import ScriptedBackend
from nexus.agent.config import AgentConfig, Limits
from nexus.agent.run import TaskSpec, run_task
from nexus.agent.trajectory import load
from tests.conftest import LOCAL

TOUCH = "Make a file.\n\n```bash\necho new > notes.txt\n```"
ECHO = "Again.\n\n```bash\necho hi\n```"


def run(calc_repo, tmp_path, replies, backend=None, **kw):
    limit_keys = {"max_steps", "max_generated_tokens", "max_wall_seconds", "command_timeout", "max_format_errors"}
    limits = Limits(**{k: v for k, v in kw.items() if k in limit_keys})
    config = AgentConfig(limits=limits, **{k: v for k, v in kw.items() if k not in limit_keys})
    spec = TaskSpec(repo=str(calc_repo.path), commit=calc_repo.commit, issue="do things", model="scripted:-",
                    sandbox=LOCAL, config=config.as_dict())
    outcome = run_task(spec, calc_repo, tmp_path / "out", backend=backend or ScriptedBackend(replies))
    return outcome, load(tmp_path / "out" / "trajectory.json")


def test_step_limit_still_extracts_the_patch(calc_repo, tmp_path):
    outcome, traj = run(calc_repo, tmp_path, [TOUCH] + [ECHO] * 20, max_steps=3)
    assert outcome.exit_status == traj["exit_status"] == "step_limit"
    assert len(traj["steps"]) == 3
    assert "+new" in (tmp_path / "out" / "patch.diff").read_text() and "notes.txt" in traj["patch"]


def test_generated_token_limit(calc_repo, tmp_path):
    outcome, traj = run(calc_repo, tmp_path, [ECHO] * 20, max_generated_tokens=10)
    assert outcome.exit_status == "token_limit"
    per_step = traj["steps"][0]["generated_tokens"]
    assert traj["totals"]["generated_tokens"] >= 10 and len(traj["steps"]) == -(-10 // per_step)


def test_format_errors_in_a_row_stop_the_task_with_corrections_sent(calc_repo, tmp_path):
    outcome, traj = run(calc_repo, tmp_path, [ECHO, "no block", "still none", "```python\nx\n```", ECHO],
                        max_format_errors=3)
    assert outcome.exit_status == "format_errors" and len(traj["steps"]) == 4
    corrections = [m for m in traj["messages"] if m["role"] == "user" and m["content"].startswith("Format error")]
    assert len(corrections) == 3


def test_a_good_reply_resets_the_format_error_count(calc_repo, tmp_path):
    replies = ["bad", "bad", ECHO, "bad", "bad", "```bash\nsubmit\n```"]
    outcome, _ = run(calc_repo, tmp_path, replies, max_format_errors=3)
    assert outcome.exit_status == "submitted"


def test_command_timeout_kills_the_command_and_says_so(calc_repo, tmp_path):
    t0 = time.monotonic()
    outcome, traj = run(calc_repo, tmp_path, ["```bash\nsleep 30\n```", "```bash\nsubmit\n```"], command_timeout=1)
    assert time.monotonic() - t0 < 20
    step = traj["steps"][0]
    assert step["timed_out"] and step["execute_s"] < 10
    assert "timed out" in step["observation"]
    assert outcome.exit_status == "submitted"


def test_wall_time_limit(calc_repo, tmp_path):
    outcome, traj = run(calc_repo, tmp_path, ["```bash\nsleep 1\n```"] * 20, max_wall_seconds=1.5)
    assert outcome.exit_status == "time_limit"
    assert 2 <= len(traj["steps"]) <= 3 and traj["totals"]["active_seconds"] >= 1.5


def test_long_observation_is_cut_head_and_tail(calc_repo, tmp_path):
    cmd = "```bash\nseq 1 20000\n```"
    _, traj = run(calc_repo, tmp_path, [cmd, "```bash\nsubmit\n```"], max_observation_chars=2000)
    step = traj["steps"][0]
    obs = step["observation"]
    assert step["truncated"] and step["output_chars"] > 20000
    assert "\n1\n2\n3\n" in obs and obs.endswith("\n20000\n\n[exit code 0]")
    assert "omitted from the middle" in obs and len(obs) < 2500


class _FailingBackend(ScriptedBackend):
    """A model backend that breaks on its second turn (e.g. an out-of-memory error)."""

    def reply(self, messages, on_token=None):
        if sum(m["role"] == "assistant" for m in messages) == 1:
            raise RuntimeError("model crashed")
        return super().reply(messages, on_token)


def test_an_internal_error_is_recorded_and_the_patch_still_written(calc_repo, tmp_path):
    outcome, traj = run(calc_repo, tmp_path, [TOUCH], backend=_FailingBackend([TOUCH]))
    assert outcome.exit_status == "error" and "model crashed" in traj["error"]
    assert "notes.txt" in (tmp_path / "out" / "patch.diff").read_text()
    assert "Traceback" in (tmp_path / "out" / "error.log").read_text()
