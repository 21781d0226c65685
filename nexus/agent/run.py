"""Run one task end to end: sandbox + backend + graph + checkpointer; patch and trajectory on every exit."""

from __future__ import annotations

import json
import sqlite3
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from nexus.agent import prompts, trajectory
from nexus.agent.backends.base import Backend
from nexus.agent.config import AgentConfig
from nexus.agent.graph import build_graph, initial_state, recursion_limit
from nexus.agent.mini_trajectory import MINI, check_trajectory_format, mini_path, to_mini
from nexus.agent.repo import RepoSource
from nexus.agent.session import Session, register, unregister
from nexus.agent.tools import install_tools, restore_patch
from nexus.atomic import write_json_atomic, write_text_atomic
from nexus.errors import NexusError

TASK_FILE, TRAJ_FILE, PATCH_FILE, CKPT_FILE = "task.json", "trajectory.json", "patch.diff", "checkpoints.sqlite"


@dataclass
class TaskSpec:
    """Everything needed to run (or resume) a task; saved as task.json in the output directory."""

    repo: str  # as the user gave it: a path or a git URL
    commit: str  # full sha
    issue: str
    issue_source: str = "text"
    model: str = "embedded"
    policy: str = "nexus"
    budget: int | str = 1024  # tokens per layer, or a byte size such as "64MiB"
    chunk_size: int = 256
    sandbox: str = "auto"
    image: str | None = None
    config: dict[str, Any] = field(default_factory=lambda: AgentConfig().as_dict())
    thread_id: str = field(default_factory=lambda: "task-" + uuid.uuid4().hex[:12])
    trajectory_format: str = "nexus"  # "mini-swe-agent": also writes mini_path(out_dir) (mini_trajectory.py)
    policy_params: dict[str, Any] = field(default_factory=dict)  # -p KEY=VALUE
    device: str | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        check_trajectory_format(self.trajectory_format)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def load(cls, out_dir: Path) -> "TaskSpec":
        path = out_dir / TASK_FILE
        if not path.exists():
            raise NexusError(f"{out_dir} holds no task to resume (no {TASK_FILE}); run nexus solve without --resume.")
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as e:
            raise NexusError(f"cannot read {path} ({e}); start the task again without --resume.") from None


@dataclass
class Outcome:
    exit_status: str
    error: str | None
    out_dir: Path
    trajectory: dict[str, Any]

    @property
    def patch_path(self) -> Path:
        return self.out_dir / PATCH_FILE

    @property
    def trajectory_path(self) -> Path:
        return self.out_dir / TRAJ_FILE


def make_backend(spec: TaskSpec, config: AgentConfig) -> Backend:
    """`scripted:FILE` (no model), `replay:FILE` (script fed through the embedded model's stream), else a model."""
    from nexus.agent.backends.local import LocalBackend, StreamSpec, make_stream
    from nexus.agent.backends.scripted import ScriptedBackend, load_script

    stream_spec = StreamSpec(model=spec.model, policy=spec.policy, budget=spec.budget, chunk_size=spec.chunk_size,
                             seed=config.seed, policy_params=dict(spec.policy_params), device=spec.device,
                             dtype=spec.dtype)
    if spec.model.startswith("scripted:"):
        return ScriptedBackend(load_script(spec.model.split(":", 1)[1]), name="scripted")
    if spec.model.startswith("replay:"):
        replies = load_script(spec.model.split(":", 1)[1])
        stream_spec.model = "embedded"
        return ScriptedBackend(replies, stream=make_stream(stream_spec), protocol=config.protocol, name="replay")
    return LocalBackend(stream_spec, protocol=config.protocol, max_new_tokens=config.max_new_tokens,
                        temperature=config.temperature, top_p=config.top_p, seed=None,
                        reply_prefix=config.reply_prefix)


def open_sandbox(spec: TaskSpec, repo: RepoSource) -> Any:
    from nexus.sandbox import create_sandbox

    sandbox = create_sandbox(kind=spec.sandbox, repo=repo.path, base_commit=repo.commit, image=spec.image,
                             task_id=spec.thread_id)
    sandbox.start()
    return sandbox


def check_new_out_dir(out_dir: Path, *, can_resume: bool = True) -> None:
    """`can_resume`: whether the command has a --resume to suggest (`demo` has none)."""
    if (out_dir / TASK_FILE).exists() or (out_dir / TRAJ_FILE).exists():
        how = "pass --resume to continue it or choose" if can_resume else "choose"
        raise NexusError(f"{out_dir} already holds a task; {how} another -o DIR.")


def run_task(spec: TaskSpec, repo: RepoSource, out_dir: Path, *, resume: bool = False,
             on_event: Callable[[str, dict], None] | None = None, backend: Backend | None = None) -> Outcome:
    config = AgentConfig.from_dict(spec.config)
    started = time.time()
    prior: dict[str, Any] = {}
    if resume:  # task.json is there (the spec came from it); without a checkpoint yet the task starts again
        if (out_dir / TRAJ_FILE).exists():
            prior = trajectory.load(out_dir / TRAJ_FILE)
    else:
        check_new_out_dir(out_dir)
    backend = backend or make_backend(spec, config)  # a bad model name fails before anything is created
    out_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        write_json_atomic(out_dir / TASK_FILE, spec.as_dict())
    runs = list(prior.get("runs", []))

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(out_dir / CKPT_FILE), check_same_thread=False)
    graph = build_graph(SqliteSaver(conn))
    cfg = {"configurable": {"thread_id": spec.thread_id}, "recursion_limit": recursion_limit(config.limits.max_steps)}
    state: dict[str, Any] = {}
    exit_status, error, sandbox = None, None, None
    patch_text = ""
    task_info = {k: v for k, v in spec.as_dict().items() if k != "config"}
    emit = on_event or (lambda kind, data: None)

    def save(final: bool = False) -> dict[str, Any]:
        traj = trajectory.build(task_info, config.as_dict(), state, exit_status=exit_status, error=error,
                                started=started, patch_lines=patch_text.count("\n"))
        traj["runs"] = runs
        traj["patch"] = patch_text
        write_json_atomic(out_dir / TRAJ_FILE, traj)
        if spec.trajectory_format == MINI:
            write_json_atomic(mini_path(out_dir), to_mini(traj))
        return traj

    fresh = not resume  # a resume of a task killed before its first checkpoint starts it from the beginning
    if resume:
        saved = graph.get_state(cfg).values
        if not saved:
            fresh = True
        elif saved.get("exit_status"):
            if prior.get("exit_status") is not None:
                conn.close()
                raise NexusError(f"the task in {out_dir} already ended ({saved['exit_status']}); nothing to resume.")
            # The graph had ended but the process was killed before the trajectory recorded it: write patch.diff
            # and the trajectory from the last checkpoint; there is nothing to run, so no sandbox.
            state, exit_status = dict(saved), saved["exit_status"]
            patch_text = state["patch"] if "patch" in state else _read_patch_file(out_dir)
            runs.append({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "resumed": True,
                         "backend": backend.name, "from_step": state.get("step", 0),
                         "note": f"the task had ended ({exit_status}) while its outputs were being written; "
                                 "they were written from the last checkpoint"})
            try:
                write_text_atomic(out_dir / PATCH_FILE, patch_text)
                traj = save(final=True)
            finally:
                conn.close()
                backend.close()
            return Outcome(exit_status=exit_status, error=None, out_dir=out_dir, trajectory=traj)
        else:
            state = dict(saved)
    try:
        sandbox = open_sandbox(spec, repo)
        prefix = install_tools(sandbox)
        run_info: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                                    "resumed": resume, "sandbox": getattr(sandbox, "kind", spec.sandbox),
                                    "backend": backend.name}
        if resume:
            # The patch saved in the checkpoint itself: it describes exactly the steps that checkpoint holds.
            # patch.diff is only an output (it can be one step behind after a kill); checkpoints written before
            # the patch was part of the state have nothing better.
            saved_patch = "" if fresh else (state["patch"] if "patch" in state else _read_patch_file(out_dir))
            patch_text = saved_patch
            restore_patch(sandbox, saved_patch)
            run_info.update(from_step=state.get("step", 0), patch_restored_lines=saved_patch.count("\n"),
                            note="new sandbox with the checkpoint's patch re-applied; the KV stream is rebuilt by "
                                 "appending the transcript (see events: stream_rebuilt)" if not fresh else
                                 "killed before its first checkpoint: started again from the beginning")
            emit("resume", run_info)
        runs.append(run_info)
        register(spec.thread_id, Session(backend=backend, sandbox=sandbox, config=config, command_prefix=prefix,
                                         on_event=emit, track_patch=True))
        workdir = getattr(sandbox, "workdir", ".")
        inputs = None if not fresh else initial_state(prompts.SYSTEM.format(workdir=workdir),
                                                   prompts.TASK.format(workdir=workdir, issue=spec.issue))
        seen_steps = -1
        for values in graph.stream(inputs, cfg, stream_mode="values", durability="sync"):
            state = values
            if len(state.get("steps") or []) != seen_steps:
                seen_steps = len(state.get("steps") or [])
                patch_text = state.get("patch", patch_text)  # computed by execute, already in the checkpoint
                write_text_atomic(out_dir / PATCH_FILE, patch_text)
                save()
        exit_status = state.get("exit_status") or "stopped"
    except KeyboardInterrupt:
        exit_status, error = "interrupted", "interrupted by the user (resume with --resume)"
    except NexusError as e:
        exit_status, error = "error", str(e)
    except Exception as e:  # an internal error: keep the traceback next to the trajectory
        exit_status, error = "error", f"{type(e).__name__}: {e}"
        (out_dir / "error.log").write_text(traceback.format_exc(), encoding="utf-8")
    finally:
        if sandbox is not None:
            try:
                patch_text = sandbox.diff()
                write_text_atomic(out_dir / PATCH_FILE, patch_text)
            except Exception as e:  # the patch saved at the last step stays
                error = (error + "; " if error else "") + f"final git diff failed: {e}"
            try:
                sandbox.close()
            except Exception:
                pass
        traj = save(final=True)
        unregister(spec.thread_id)
        conn.close()
        backend.close()
    return Outcome(exit_status=exit_status, error=error, out_dir=out_dir, trajectory=traj)


def _read_patch_file(out_dir: Path) -> str:
    path = out_dir / PATCH_FILE
    return path.read_text(encoding="utf-8") if path.exists() else ""

