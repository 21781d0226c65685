"""`eval swebench run --trajectory-format mini-swe-agent` reaches the agent's task, whose mini file then lands at
trajectories/<id>/<id>.traj.json (mini-swe-agent's layout). Engine-free: the image, repo and agent are stubbed; the
agent writing the file is tests/agent/test_mini_trajectory.py."""

from __future__ import annotations

from nexus.agent import run as agent_run
from nexus.agent.mini_trajectory import mini_path
from nexus.evals.swebench import environment, repos, runner
from nexus.evals.swebench.instances import Instance


def test_the_run_option_reaches_the_task_spec(tmp_path, monkeypatch):
    seen = {}

    def fake_run_task(spec, repo, out_dir):
        seen["spec"], seen["out_dir"] = spec, out_dir
        out_dir.mkdir(parents=True)
        return agent_run.Outcome(exit_status="submitted", error=None, out_dir=out_dir, trajectory={"totals": {}})

    monkeypatch.setattr(agent_run, "run_task", fake_run_task)
    monkeypatch.setattr(environment, "ensure_instance_image", lambda inst: "img")
    monkeypatch.setattr(repos, "find_repo", lambda inst, mirror, url_template: tmp_path)
    inst = Instance(instance_id="acme__lib-1", repo="acme/lib", base_commit="0" * 40, problem_statement="x",
                    patch="", FAIL_TO_PASS=[], PASS_TO_PASS=[])
    runner.solve_instance(inst, runner.RunConfig(out_dir=tmp_path / "run", trajectory_format="mini-swe-agent"))
    assert seen["spec"].trajectory_format == "mini-swe-agent"
    assert mini_path(seen["out_dir"]) == tmp_path / "run" / "trajectories" / "acme__lib-1" / "acme__lib-1.traj.json"
