"""The agent loop as a hand-rolled langgraph StateGraph.

    check -> generate | human -> parse -> [confirm] -> execute -> check ...

Graph state holds the transcript and step records (checkpointed, so a task can resume); the KV stream lives in
the session registry. Model calls, confirmations and command execution are separate nodes because `interrupt()`
re-runs its whole node on resume: a node that interrupts must have done nothing before it.
"""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from nexus.agent import prompts
from nexus.agent.actions import parse_action
from nexus.agent.session import lookup
from nexus.sandbox.errors import PatchTooLarge


class AgentState(TypedDict, total=False):
    messages: Annotated[list[dict], operator.add]  # the transcript, exactly what the stream was fed
    steps: Annotated[list[dict], operator.add]  # one record per model (or human) turn
    events: Annotated[list[dict], operator.add]  # stream rebuilds, resumes, comments, interrupts
    pending: dict | None  # the turn in progress: reply, parsed action, timings
    step: int
    format_errors: int  # in a row
    generated_tokens: int
    elapsed_s: float  # active time (model + commands), not time spent waiting for the user
    exit_status: str | None
    task_step0: int  # step count when the current task began (the REPL runs several tasks in one session)
    patch: str  # the work tree's diff after the last command (when the session tracks it): checkpointed with the
    # step that produced it, so a resume restores exactly the work tree its checkpoint describes


def initial_state(system: str, task: str) -> AgentState:
    return AgentState(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": task}],
        steps=[], events=[], pending=None, step=0, format_errors=0, generated_tokens=0, elapsed_s=0.0,
        exit_status=None, task_step0=0, patch="",
    )


def _check(state: AgentState, config: RunnableConfig) -> dict:
    if state.get("exit_status"):
        return {}
    lim = lookup(config).config.limits
    if state.get("step", 0) - state.get("task_step0", 0) >= lim.max_steps:
        return {"exit_status": "step_limit"}
    if state.get("generated_tokens", 0) >= lim.max_generated_tokens:
        return {"exit_status": "token_limit"}
    if state.get("elapsed_s", 0.0) >= lim.max_wall_seconds:
        return {"exit_status": "time_limit"}
    return {}


def _route_check(state: AgentState, config: RunnableConfig) -> str:
    if state.get("exit_status"):
        return END
    return "human" if lookup(config).config.mode == "human" else "generate"


def _generate(state: AgentState, config: RunnableConfig) -> dict:
    s = lookup(config)
    t0 = time.perf_counter()
    step = state.get("step", 0) + 1
    s.on_event("generate", {"step": step})
    reply, sync = s.backend.reply(state["messages"], on_token=lambda piece: s.on_event("token", {"text": piece}))
    events = []
    if sync.rebuilt:
        events.append({"event": "stream_rebuilt", "reason": sync.rebuilt, "step": step,
                       "messages": sync.appended, "seconds": round(sync.seconds, 3)})
        s.on_event("rebuilt", events[-1])
    pending = {
        "step": step, "source": "model", "response": reply.text, "generated_tokens": reply.n_tokens,
        "stop_reason": reply.stop_reason, "append_s": round(sync.seconds, 4), "generate_s": round(reply.seconds, 4),
        "stats": s.backend.stats(),
    }
    s.on_event("stats", {"step": step, "stats": pending["stats"]})
    return {
        "messages": [{"role": "assistant", "content": reply.text}],
        "pending": pending, "events": events,
        "generated_tokens": state.get("generated_tokens", 0) + reply.n_tokens,
        "elapsed_s": state.get("elapsed_s", 0.0) + time.perf_counter() - t0,
    }


def _human(state: AgentState, config: RunnableConfig) -> dict:
    step = state.get("step", 0) + 1
    command = interrupt({"kind": "human", "step": step})  # the REPL answers with the command the human typed
    text = f"```bash\n{command}\n```"
    pending = {"step": step, "source": "human", "response": text, "generated_tokens": 0,
               "stop_reason": "human", "append_s": 0.0, "generate_s": 0.0, "stats": lookup(config).backend.stats()}
    return {"messages": [{"role": "assistant", "content": text}], "pending": pending}


def _parse(state: AgentState, config: RunnableConfig) -> dict:
    s = lookup(config)
    pending = dict(state["pending"])
    action = parse_action(pending["response"])
    if action.kind == "format_error":
        errors = state.get("format_errors", 0) + 1
        note = prompts.FORMAT_ERROR.format(error=action.error)
        record = {**pending, "action": None, "format_error": action.error, "observation": note}
        s.on_event("format_error", {"step": pending["step"], "error": action.error})
        out: dict[str, Any] = {"messages": [{"role": "user", "content": note}], "steps": [record], "pending": None,
                               "format_errors": errors, "step": pending["step"]}
        if errors >= s.config.limits.max_format_errors:
            out["exit_status"] = "format_errors"
        return out
    if action.kind == "submit":
        s.on_event("submit", {"step": pending["step"]})
        return {"steps": [{**pending, "action": "submit", "observation": None}], "pending": None,
                "format_errors": 0, "step": pending["step"], "exit_status": "submitted"}
    pending["action"] = action.command
    s.on_event("action", {"step": pending["step"], "command": action.command})
    return {"pending": pending, "format_errors": 0}


def _route_parse(state: AgentState, config: RunnableConfig) -> str:
    if state.get("exit_status") or not state.get("pending"):
        return "check"
    return "confirm" if lookup(config).config.mode == "confirm" else "execute"


def _confirm(state: AgentState, config: RunnableConfig) -> dict:
    pending = state["pending"]
    decision = interrupt({"kind": "confirm", "step": pending["step"], "command": pending["action"]})
    if decision.get("approve"):
        return {"pending": {**pending, "confirmed": True}}
    comment = (decision.get("comment") or "").strip()
    note = prompts.REJECTED.format(comment=f" Their comment: {comment}" if comment else "")
    record = {**pending, "rejected": True, "comment": comment, "observation": note}
    return {"messages": [{"role": "user", "content": note}], "steps": [record], "pending": None,
            "step": pending["step"]}


def _route_confirm(state: AgentState) -> str:
    return "execute" if state.get("pending") else "check"


def _execute(state: AgentState, config: RunnableConfig) -> dict:
    s = lookup(config)
    pending = state["pending"]
    t0 = time.perf_counter()
    result = s.sandbox.execute(s.command_prefix + pending["action"], timeout=s.config.limits.command_timeout)
    seconds = time.perf_counter() - t0
    text, cut = prompts.observation(result.output, result.returncode, result.timed_out, result.truncated,
                                    s.config.max_observation_chars)
    record = {**pending, "observation": text, "returncode": result.returncode, "timed_out": result.timed_out,
              "output_chars": len(result.output), "truncated": bool(cut or result.truncated),
              "execute_s": round(seconds, 4)}
    s.on_event("observation", {"step": pending["step"], "text": text, "returncode": result.returncode})
    out = {"messages": [{"role": "user", "content": text}], "steps": [record], "pending": None,
           "step": pending["step"], "elapsed_s": state.get("elapsed_s", 0.0) + seconds}
    if s.track_patch:
        # Part of this node's result, so langgraph saves it in one SQLite transaction with the step record: no
        # checkpoint can say the step ran without also holding the work tree it left (issue 13).
        try:
            out["patch"] = s.sandbox.diff()
        except PatchTooLarge as e:
            # The last patch that fitted stays the run's patch; the model is told, so it can delete the file.
            record["patch_too_large"] = True
            note = f"\n[nexus: {e} The patch kept is the one from before this command.]"
            out["messages"][0]["content"] += note
            record["observation"] += note
    return out


def build_graph(checkpointer: Any = None) -> Any:
    g = StateGraph(AgentState)
    g.add_node("check", _check)
    g.add_node("generate", _generate)
    g.add_node("human", _human)
    g.add_node("parse", _parse)
    g.add_node("confirm", _confirm)
    g.add_node("execute", _execute)
    g.add_edge(START, "check")
    g.add_conditional_edges("check", _route_check, ["generate", "human", END])
    g.add_edge("generate", "parse")
    g.add_edge("human", "parse")
    g.add_conditional_edges("parse", _route_parse, ["check", "confirm", "execute"])
    g.add_conditional_edges("confirm", _route_confirm, ["execute", "check"])
    g.add_edge("execute", "check")
    return g.compile(checkpointer=checkpointer)


def recursion_limit(max_steps: int) -> int:
    """Supersteps a task may take: at most 5 nodes per step plus slack. Our own step limit ends it first."""
    return 5 * max_steps + 20
