"""mini-swe-agent's trajectory format, both ways, so the tools people browse runs with work on ours.

mini-swe-agent saves `{"info": {"exit_status", "submission", "model_stats", "config"}, "messages": [...],
"trajectory_format": "mini-swe-agent-1.1"}` as `<name>.traj.json`; each message may carry an `extra` dict (the
parsed `actions` of a reply, the `returncode` of an observation, the `exit` message that ends the run). `to_mini`
writes ours in that shape; what only nexus records (cache stats per step, the task, the totals) rides along in
`extra.nexus_step` and `info.nexus`, which mini's tools ignore, so `from_mini` gives our trajectory back whole.
`from_mini` reads mini-swe-agent's own files too (text or tool-call models), for `nexus inspect`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus.agent import trajectory
from nexus.agent.actions import parse_action
from nexus.errors import NexusError

MINI = "mini-swe-agent"
TRAJECTORY_FORMATS = ("nexus", MINI)
MINI_FORMAT = "mini-swe-agent-1.1"  # the version mini-swe-agent 2.x writes
NEXUS_FILE = "trajectory.json"

# Our exit statuses under the names mini-swe-agent uses, so its batch tools group them the same way.
_TO_MINI_STATUS = {"submitted": "Submitted", "step_limit": "LimitsExceeded", "token_limit": "LimitsExceeded",
                   "time_limit": "TimeExceeded", "format_errors": "RepeatedFormatError",
                   "interrupted": "KeyboardInterrupt"}


def check_trajectory_format(name: str) -> str:
    if name not in TRAJECTORY_FORMATS:
        raise NexusError(f"unknown trajectory format {name!r}; use one of: {', '.join(TRAJECTORY_FORMATS)}.")
    return name


def mini_path(out_dir: Path) -> Path:
    """`<dir>/<dir name>.traj.json`: in an eval run that is `trajectories/<id>/<id>.traj.json`, mini's own layout."""
    return out_dir / f"{out_dir.resolve().name}.traj.json"


def is_mini(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("trajectory_format", "")).startswith(MINI)


def to_mini(traj: dict[str, Any]) -> dict[str, Any]:
    steps = list(traj.get("steps") or [])
    status = traj.get("exit_status")
    patch = traj.get("patch") or ""
    messages = []
    for message in traj.get("messages") or []:
        out = {"role": message["role"], "content": message["content"]}
        if message["role"] == "assistant" and steps:
            step = steps.pop(0)
            # The reply is this message and the observation the next one; a step without one keeps its None.
            kept = {k: v for k, v in step.items() if k != "response" and not (k == "observation" and v is not None)}
            out["extra"] = {"actions": _mini_actions(step), "nexus_step": kept}
        elif message["role"] == "user" and _awaits_observation(messages):
            out["extra"] = _observation_extra(messages[-1]["extra"]["nexus_step"])
        messages.append(out)
    mini_status = _TO_MINI_STATUS.get(status, status) or ""
    if status is not None:
        messages.append({"role": "exit", "content": patch if mini_status == "Submitted" else mini_status,
                         "extra": {"exit_status": mini_status, "submission": patch}})
    task = traj.get("task") or {}
    data = {
        "info": {
            "exit_status": mini_status,
            "submission": patch,
            "model_stats": {"instance_cost": 0.0, "api_calls": sum(1 for s in traj.get("steps") or []
                                                                   if s.get("source") == "model")},
            "config": {"model": {"model_name": task.get("model")}, "agent": traj.get("config") or {},
                       "agent_type": "nexus"},
            "nexus": {k: traj.get(k) for k in ("format", "task", "config", "exit_status", "error", "started",
                                               "updated", "totals", "events", "runs")},
        },
        "messages": messages,
        "trajectory_format": MINI_FORMAT,
    }
    if str(task.get("issue_source", "")).startswith("swebench:"):
        data["instance_id"] = task["issue_source"].split(":", 1)[1]
    return data


def from_mini(data: dict[str, Any], source: Path | str = "the file") -> dict[str, Any]:
    """Our trajectory shape (what `nexus inspect` renders) from a mini-swe-agent trajectory."""
    info, raw = data.get("info") or {}, data.get("messages")
    if not isinstance(info, dict) or not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise NexusError(f"{source} says it is a {MINI} trajectory but its info or messages have the wrong shape.")
    ours = info.get("nexus") if isinstance(info.get("nexus"), dict) else {}
    messages, steps, exit_message = [], [], None
    for i, message in enumerate(raw):
        if message.get("role") == "exit":
            exit_message = message
            continue
        messages.append({"role": message.get("role"), "content": _text(message.get("content"))})
        if message.get("role") == "assistant":
            steps.append(_step(message, _observations(raw[i + 1:]), number=len(steps) + 1))
    status = ours.get("exit_status") if ours else (info.get("exit_status") or
                                                   ((exit_message or {}).get("extra") or {}).get("exit_status") or None)
    model = ((info.get("config") or {}).get("model") or {}).get("model_name")
    first_user = next((m["content"] for m in messages if m["role"] == "user"), "")
    task = ours.get("task") or {"repo": data.get("instance_id"), "model": model, "issue": first_user,
                                "issue_source": data.get("trajectory_format")}
    stats = info.get("model_stats") or {}
    totals = ours.get("totals") or {"steps": len(steps), "api_calls": stats.get("api_calls"),
                                    "instance_cost": stats.get("instance_cost")}
    return {
        **{k: ours.get(k) for k in ("started", "updated", "error")},
        "format": trajectory.FORMAT,
        "converted_from": data.get("trajectory_format"),
        "task": task,
        "config": ours.get("config") or {"protocol": None},
        "exit_status": status,
        "totals": totals,
        "events": ours.get("events") or [],
        "runs": ours.get("runs") or [],
        "steps": steps,
        "messages": messages,
        "patch": info.get("submission") or "",
    }


def load_any(path: str | Path) -> dict[str, Any]:
    """A nexus trajectory, a mini-swe-agent `.traj.json`, or a run directory holding one of them."""
    p = Path(path)
    if p.is_dir() and not (p / NEXUS_FILE).exists():
        minis = sorted(p.glob("*.traj.json"))
        if len(minis) == 1:
            p = minis[0]
    if p.is_file():
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            data = None  # trajectory.load says what is wrong with it
        if is_mini(data):
            return from_mini(data, source=p)
    return trajectory.load(p)


def _mini_actions(step: dict[str, Any]) -> list[dict[str, str]]:
    action = step.get("action")
    return [{"command": action}] if action and not step.get("format_error") else []


def _awaits_observation(messages: list[dict[str, Any]]) -> bool:
    """The last message is one of our steps that recorded an observation (the message now being converted)."""
    step = (messages[-1].get("extra") or {}).get("nexus_step") if messages else None
    return step is not None and "observation" not in step


def _observation_extra(step: dict[str, Any]) -> dict[str, Any]:
    if step.get("format_error"):
        return {"interrupt_type": "FormatError"}
    return {"returncode": step.get("returncode")} if "returncode" in step else {}


def _observations(rest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The replies to one assistant message: its tool results, or the one user message after it."""
    tools = []
    for message in rest:
        if message.get("role") == "tool":
            tools.append(message)
        else:
            return tools or ([message] if message.get("role") == "user" else [])
    return tools


def _step(message: dict[str, Any], observations: list[dict[str, Any]], number: int) -> dict[str, Any]:
    extra = message.get("extra") or {}
    response = _text(message.get("content"))
    observation = "\n".join(_text(o.get("content")) for o in observations) if observations else None
    if isinstance(extra.get("nexus_step"), dict):  # written by to_mini: the step exactly as recorded
        return {"observation": observation, **extra["nexus_step"], "response": response}
    commands = [a.get("command") for a in extra.get("actions") or [] if isinstance(a, dict) and a.get("command")]
    if not commands and "actions" not in extra:  # format 1 files carry no parsed actions: parse the reply
        parsed = parse_action(response)
        commands = [parsed.command] if parsed.command else []
    obs_extra = (observations[0].get("extra") or {}) if observations else {}
    step = {"step": number, "source": "model", "response": response, "action": "\n".join(commands) or None,
            "observation": observation, "returncode": obs_extra.get("returncode"), "cost": extra.get("cost")}
    if obs_extra.get("interrupt_type") == "FormatError":
        step["format_error"] = "the reply did not hold exactly one action"
    return step


def _text(content: Any) -> str:
    """Message content as text: mini's messages may hold a list of parts (text, images) or None."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)
