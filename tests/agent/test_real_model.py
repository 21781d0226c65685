"""What must be shown #2: the real embedded model (SmolLM2-135M-Instruct) drives the loop for a few steps in the
local and the docker sandbox. It rarely solves anything; what is checked is the loop, the limits, the trajectory
and that `stream` mode never re-prefilled (asserted from the stream's own stats)."""

import pytest

from nexus.agent.trajectory import load

from .conftest import sandbox_kinds
from tests.conftest import LOCAL

MAX_NEW, BUDGET, CHUNK = 24, 512, 128


@pytest.mark.slow
@pytest.mark.parametrize("kind", sandbox_kinds())
def test_embedded_model_runs_the_loop(kind, calc_repo, cli, tmp_path, request):
    if kind == "docker":
        request.getfixturevalue("docker_ready")
    out = tmp_path / "run"
    r = cli("solve", "--repo", calc_repo.path, "--issue", "add() returns a-b; fix calculator/ops.py",
            "--model", "embedded", "--policy", "nexus", "--budget", BUDGET, "--chunk-size", CHUNK,
            "--sandbox", kind, "--max-steps", 2, "--max-new-tokens", MAX_NEW, "--max-tokens", 40,
            "--reply-prefix", "```bash\\n", "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    traj = load(out)
    steps = traj["steps"]
    # limits hold: at most 2 turns, each at most MAX_NEW tokens, and the run stopped because of a limit or submit
    assert 1 <= len(steps) <= 2
    assert all(0 < s["generated_tokens"] <= MAX_NEW for s in steps)
    assert traj["exit_status"] in ("step_limit", "token_limit", "submitted", "format_errors")
    if traj["exit_status"] == "token_limit":
        assert traj["totals"]["generated_tokens"] >= 40
    # the reply prefix makes the tiny model write commands: a model-written command ran in the sandbox
    assert all(s["response"].startswith("```bash\n") for s in steps)
    ran = [s for s in steps if s.get("action") not in (None, "submit") and "returncode" in s]
    assert ran, [(s["response"], s.get("format_error")) for s in steps]
    assert traj["runs"][0]["sandbox"] == kind and traj["runs"][0]["backend"] == "local:embedded"
    # the transcript holds what the model said; every step has an observation or a correction for it
    assert [m["content"] for m in traj["messages"] if m["role"] == "assistant"] == [s["response"] for s in steps]
    # one stream for the whole task: never reset, never rebuilt, tokens seen only grow
    stats = [s["stats"] for s in steps]
    assert all(s["resets"] == 0 for s in stats)
    assert not [e for e in traj["events"] if e["event"] == "stream_rebuilt"]
    seen = [s["tokens_seen"] for s in stats]
    assert seen == sorted(seen) and seen[0] > 200  # the system prompt and the task are in the cache
    assert all(s["tokens_stored"] <= BUDGET for s in stats)
    assert all(s["budget"] == BUDGET and s["policy"]["policy"] == "nexus" for s in stats)
    assert f"exit status   {traj['exit_status']}" in r.stdout and "peak cache" in r.stdout


@pytest.mark.slow
def test_embedded_model_under_the_reprefill_protocol(calc_repo, cli, tmp_path):
    """`--protocol reprefill` end to end: before every reply after the first, the cache is reset and the whole
    transcript appended again (evicting again); the trajectory says so at each turn."""
    out = tmp_path / "run"
    r = cli("solve", "--repo", calc_repo.path, "--issue", "add() returns a-b; fix calculator/ops.py",
            "--model", "embedded", "--policy", "nexus", "--budget", BUDGET, "--chunk-size", CHUNK,
            "--sandbox", LOCAL, "--protocol", "reprefill", "--max-steps", 3, "--max-new-tokens", MAX_NEW,
            "--reply-prefix", "```bash\\n", "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    traj = load(out)
    steps = traj["steps"]
    assert len(steps) >= 2, [s["response"] for s in steps]
    resets = [s["stats"]["resets"] for s in steps]
    assert resets == list(range(len(steps)))  # one rebuild per turn after the first
    rebuilt = [e for e in traj["events"] if e["event"] == "stream_rebuilt"]
    assert [e["reason"] for e in rebuilt] == ["reprefill"] * (len(steps) - 1)
    # a rebuilt stream has seen the transcript again, and still holds no more than the budget
    assert all(s["stats"]["tokens_stored"] <= BUDGET for s in steps)
    assert steps[-1]["stats"]["tokens_seen"] > steps[0]["stats"]["tokens_seen"]
