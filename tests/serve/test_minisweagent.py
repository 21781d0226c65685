"""mini-swe-agent's own DefaultAgent loop, through its litellm model with api_base at a live `nexus serve`.

The server refuses tool calls, so the agent uses mini-swe-agent's text-based litellm model and its
mini_textbased.yaml configuration. Commands the 135M model writes run in a nexus sandbox on a copy of the
bundled example repository, never on this host. The model will not fix the bug: this checks the plumbing.
"""

from __future__ import annotations

import platform
from pathlib import Path

import httpx
import pytest

from tests.conftest import LOCAL
from tests.serve.conftest import BUDGET, CHUNK, start_server

pytestmark = pytest.mark.slow


class SandboxEnvironment:
    """mini-swe-agent's Environment protocol over a nexus sandbox."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.commands: list[str] = []

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
        from minisweagent.exceptions import Submitted

        command = action.get("command", "")
        self.commands.append(command)
        result = self.sandbox.execute(command, timeout=timeout or 20, cwd=cwd or None)
        output = {"output": result.output, "returncode": result.returncode, "exception_info": ""}
        lines = result.output.lstrip().splitlines()
        if lines and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" and result.returncode == 0:
            raise Submitted({"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}})
        return output

    def get_template_vars(self, **kwargs) -> dict:
        return {**platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment_type": "nexus-sandbox"}}}


def test_mini_swe_agent_drives_one_continuous_stream(embedded, tmp_path, monkeypatch):
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea"))
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of litellm's price list
    pytest.importorskip("minisweagent")
    import yaml
    from minisweagent import package_dir
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    from nexus.agent.examples import EXAMPLE_ISSUE, make_example_repo
    from nexus.sandbox import create_sandbox

    config = yaml.safe_load((Path(package_dir) / "config" / "mini_textbased.yaml").read_text())
    srv = start_server(*embedded, api_key="k")
    repo = make_example_repo()
    try:
        with create_sandbox(LOCAL, repo.path, base_commit=repo.commit) as sandbox:
            env = SandboxEnvironment(sandbox)
            class RecordingModel(LitellmTextbasedModel):
                replies: list[str] = []

                def _query(self, messages, **kwargs):
                    response = super()._query(messages, **kwargs)
                    self.replies.append(response.choices[0].message.content)
                    return response

            model = RecordingModel(
                model_name="openai/embedded", cost_tracking="ignore_errors",
                model_kwargs={"api_base": srv.base_url, "api_key": "k", "temperature": 0, "max_tokens": 96},
                **{k: v for k, v in config["model"].items() if k not in ("model_name", "model_kwargs")})
            agent = DefaultAgent(model, env, **{**config["agent"], "step_limit": 4, "cost_limit": 0,
                                                "max_consecutive_format_errors": 0})
            agent.run(task=Path(EXAMPLE_ISSUE).read_text())
        sessions = httpx.get(srv.base_url + "/sessions", headers={"Authorization": "Bearer k"}).json()["data"]
    finally:
        srv.stop()
        repo.cleanup()
    assert agent.n_calls == 4  # the step limit ended the run; every step reached the server
    assert len(sessions) == 1, sessions  # one conversation, one stream
    s = sessions[0]
    # mini-swe-agent keeps a reply in its history only when it parses as one action; a dropped reply makes the
    # next request's history differ from the stream, which is then rebuilt (and only then)
    kept = {m["content"] for m in agent.messages if m.get("role") == "assistant"}
    dropped_then_continued = sum(r not in kept for r in model.replies[:-1])
    assert s["turns"] == 4 and s["rebuilds"] == dropped_then_continued
    assert s["tokens_seen"] > BUDGET and s["tokens_stored"] <= BUDGET + CHUNK and s["eviction_events"] > 0
