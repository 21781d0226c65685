"""`nexus repl`: an interactive agent session in one repository, on one KV stream.

Type a task; the model proposes one command per turn. Modes: confirm (ask before each command), yolo (run
everything), human (you type the commands; the model's stream still sees them). Ctrl-C stops the current step and
asks for a comment that is sent to the model. The confirmation is a langgraph `interrupt()` in its own node.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.types import Command

from nexus.agent import prompts, trajectory
from nexus.agent.config import AgentConfig, Limits
from nexus.agent.graph import build_graph, initial_state, recursion_limit
from nexus.agent.repo import open_repo
from nexus.agent.run import PATCH_FILE, TRAJ_FILE, TaskSpec, make_backend, open_sandbox
from nexus.agent.session import Session, register, unregister
from nexus.agent.tools import install_tools
from nexus.agent.ui import ConsoleUI, status_line
from nexus.atomic import write_json_atomic, write_text_atomic
from nexus import interrupts
from nexus.errors import NexusError
from nexus.runtime.budget import budget_option

MODES = ("confirm", "yolo", "human")
HELP = """Type a task (or, once a task runs, a message to the model). Slash commands:
  /confirm  ask before running each command (default)    /yolo   run commands without asking
  /human    you type the commands yourself                /stats  cache statistics of the stream
  /budget N rebuild the stream with a budget of N tokens  /policy P  rebuild the stream with policy P
  /diff     the patch so far                              /help   this text
  /exit     save the patch and trajectory, and quit
At a confirmation: Enter or y runs the command, n asks for a comment, any other text rejects it with that comment.
Ctrl-C stops the current step and asks for a comment for the model."""


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def nexus_home() -> Path:
    return Path(os.environ.get("NEXUS_HOME") or Path.home() / ".nexus")


@dataclass
class ReplOptions:
    repo: str = "."
    model: str = "embedded"
    policy: str = "nexus"
    budget: int | str = 2048
    chunk_size: int = 256
    sandbox: str = "auto"
    mode: str = "confirm"
    max_new_tokens: int = 256
    history: Path | None = None
    out: Path | None = None
    max_steps: int = 50  # per task
    policy_params: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None
    reply_prefix: str = ""  # every model reply starts with this text (e.g. "```bash\n" for tiny models)


class Repl:
    def __init__(self, options: ReplOptions) -> None:
        if options.mode not in MODES:
            raise NexusError(f"unknown mode {options.mode!r}; use one of: {', '.join(MODES)}.")
        self.o = options
        self.state: dict[str, Any] = {}
        self.started = time.time()
        self.ui = ConsoleUI()
        self.ui.mode = options.mode
        self._exit_requested = False

    # -- input --------------------------------------------------------------------------------------------------
    def _setup_history(self) -> None:
        self.history = self.o.history or nexus_home() / "repl_history"
        try:
            import readline

            self.history.parent.mkdir(parents=True, exist_ok=True)
            if self.history.exists():
                readline.read_history_file(str(self.history))
            readline.set_history_length(1000)
            self._readline = readline
        except (ImportError, OSError):
            self._readline = None

    def _ask(self, prompt: str) -> str | None:
        """One line from the user; None on EOF (Ctrl-D). History is saved after every line."""
        try:
            line = input(prompt)
        except EOFError:
            print()
            return None
        if self._readline is not None and line.strip():
            try:
                self._readline.write_history_file(str(self.history))
            except OSError:
                pass
        return line.strip()

    # -- session ------------------------------------------------------------------------------------------------
    def run(self) -> int:
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C must stop a step even when our parent ignored SIGINT (nohup, some runners and test harnesses),
            # and even when CPython drops the KeyboardInterrupt inside a garbage-collector callback.
            interrupts.install()
            # `kill PID` ends the session the way /exit does: the finally below writes the patch and trajectory
            signal.signal(signal.SIGTERM, _terminate)
        source = open_repo(self.o.repo)
        self.out = self.o.out or nexus_home() / "sessions" / time.strftime("%Y%m%d-%H%M%S")
        config = AgentConfig(limits=Limits(max_steps=self.o.max_steps), max_new_tokens=self.o.max_new_tokens,
                             mode=self.o.mode, reply_prefix=self.o.reply_prefix)
        self.spec = TaskSpec(repo=str(source.path), commit=source.commit, issue="(interactive session)",
                             issue_source="repl", model=self.o.model, policy=self.o.policy, budget=self.o.budget,
                             chunk_size=self.o.chunk_size, sandbox=self.o.sandbox, config=config.as_dict(),
                             policy_params=self.o.policy_params, device=self.o.device, dtype=self.o.dtype)
        self.config = config
        self.backend = make_backend(self.spec, config)
        self.sandbox = open_sandbox(self.spec, source)
        try:
            prefix = install_tools(self.sandbox)
            self.out.mkdir(parents=True, exist_ok=True)
            self.session = Session(self.backend, self.sandbox, config, command_prefix=prefix, on_event=self.ui)
            register(self.spec.thread_id, self.session)
            self.conn = sqlite3.connect(str(self.out / "checkpoints.sqlite"), check_same_thread=False)
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.graph = build_graph(SqliteSaver(self.conn))
            self.cfg = {"configurable": {"thread_id": self.spec.thread_id},
                        "recursion_limit": recursion_limit(config.limits.max_steps)}
            self._setup_history()
            print(f"nexus repl in {source.path} at {source.commit[:10]} ({getattr(self.sandbox, 'kind', '?')} "
                  f"sandbox, {self.backend.name}, mode {config.mode}). /help lists commands.", flush=True)
            print(status_line(self.backend.stats(), config.mode), flush=True)
            self._loop()
        finally:
            self._finish()
            unregister(self.spec.thread_id)
        return 0

    def _loop(self) -> None:
        while True:
            try:
                line = self._ask("nexus> ")
            except KeyboardInterrupt:
                interrupts.clear()
                print("\n(use /exit to quit)", flush=True)
                continue
            if line is None:
                return
            if not line:
                continue
            if line.startswith("/"):
                if self._slash(line) == "exit":
                    return
                continue
            self._drive(self._task_input(line))
            if self._exit_requested:
                return

    def _task_input(self, text: str) -> dict[str, Any]:
        if not self.state:
            workdir = getattr(self.sandbox, "workdir", ".")
            return initial_state(prompts.SYSTEM.format(workdir=workdir), prompts.TASK.format(workdir=workdir, issue=text))
        return {"messages": [{"role": "user", "content": text}], "exit_status": None, "pending": None,
                "format_errors": 0, "task_step0": self.state.get("step", 0)}

    def _drive(self, inputs: Any) -> None:
        """Run the graph until the task ends, answering its interrupts (confirm / human) from the terminal."""
        while True:
            try:
                for values in self.graph.stream(inputs, self.cfg, stream_mode="values"):
                    self.state = {k: v for k, v in values.items() if k != "__interrupt__"}
                    self._save()
                    interrupts.raise_if_pressed()  # a Ctrl-C dropped during the model's reply stops here
            except KeyboardInterrupt:
                interrupts.clear()
                print("\n^C step interrupted.", flush=True)
                self.backend.invalidate("interrupted")
                self.state = dict(self.graph.get_state(self.cfg).values)
                try:
                    comment = self._ask("comment for the model (Enter = pause the task)> ")
                except KeyboardInterrupt:
                    interrupts.clear()
                    comment = None
                if not comment:
                    print("task paused; type a message to continue it.", flush=True)
                    return
                step = self.state.get("step", 0) + 1
                inputs = {"messages": [{"role": "user", "content": prompts.INTERRUPTED.format(comment=comment)}],
                          "pending": None, "exit_status": None,
                          "events": [{"event": "interrupted", "step": step, "comment": comment}]}
                continue
            snapshot = self.graph.get_state(self.cfg)
            if not snapshot.interrupts:
                status = self.state.get("exit_status")
                print(f"task ended: {status} after {self.state.get('step', 0)} steps. "
                      "Type another task, or /exit.", flush=True)
                return
            answer = self._answer(snapshot.interrupts[0].value)
            if answer is None:  # EOF, /exit or Ctrl-C at a prompt: leave the task paused
                return
            inputs = Command(resume=answer)

    def _answer(self, request: dict[str, Any]) -> Any:
        try:
            return self._answer_prompt(request)
        except KeyboardInterrupt:
            # as at `nexus>`: Ctrl-C never ends the session (the patch and trajectory stay current); it leaves the
            # task paused at this prompt, and the next message continues it
            interrupts.clear()
            print("\n^C nothing run; the task is paused: type a message to continue it, or /exit to quit.",
                  flush=True)
            return None

    def _answer_prompt(self, request: dict[str, Any]) -> Any:
        while True:
            if request["kind"] == "confirm":
                line = self._ask("run it? [Y/n/comment] ")
            else:
                line = self._ask("command> ")
            if line is None:
                return None
            if line.startswith("/"):
                result = self._slash(line)
                if result == "exit":
                    self._exit_requested = True
                    return None
                if request["kind"] == "confirm" and self.config.mode == "yolo":
                    return {"approve": True}
                if request["kind"] == "human" and self.config.mode != "human":
                    print("left human mode; type your command here once more, or a message after the task.")
                continue
            if request["kind"] == "human":
                if line:
                    return line
                continue
            if line.lower() in ("", "y", "yes"):
                return {"approve": True}
            if line.lower() in ("n", "no"):
                line = self._ask("comment> ") or ""
            print("not run; your comment goes to the model." if line else "not run.", flush=True)
            return {"approve": False, "comment": line}

    # -- slash commands -----------------------------------------------------------------------------------------
    def _slash(self, line: str) -> str | None:
        cmd, _, arg = line.partition(" ")
        arg = arg.strip()
        if cmd in ("/exit", "/quit"):
            return "exit"
        if cmd in ("/confirm", "/yolo", "/human"):
            self.config.mode = self.ui.mode = cmd[1:]
            print(f"mode: {self.config.mode}", flush=True)
        elif cmd == "/stats":
            stats = self.backend.stats()
            if stats:
                for key in ("tokens_seen", "tokens_stored", "budget", "cache_bytes", "stored_bytes",
                            "peak_cache_bytes", "eviction_events", "tokens_evicted", "resets"):
                    print(f"  {key:17} {stats.get(key)}")
                print(f"  {'policy':17} {stats.get('policy', {}).get('policy')}")
            print(f"  {'steps':17} {self.state.get('step', 0)}   generated tokens {self.state.get('generated_tokens', 0)}")
            print(status_line(stats, self.config.mode), flush=True)
        elif cmd in ("/budget", "/policy"):
            if not hasattr(self.backend, "reconfigure"):
                print(f"{cmd} needs a model backend; this session uses {self.backend.name}.", flush=True)
                return None
            try:
                if cmd == "/budget":
                    self.backend.reconfigure(budget=budget_option(arg))
                else:
                    if not arg:
                        raise ValueError
                    self.backend.reconfigure(policy=arg)
            except ValueError:
                print(f"usage: {cmd} {'N|SIZE' if cmd == '/budget' else 'POLICY'}", flush=True)
                return None
            except NexusError as e:
                print(f"error: {e}", flush=True)
                return None
            print(f"stream rebuilt on the next reply with {cmd[1:]} {arg}", flush=True)
            print(status_line(self.backend.stats(), self.config.mode), flush=True)
        elif cmd == "/diff":
            print(self.sandbox.diff() or "(no changes)", flush=True)
        elif cmd == "/help":
            print(HELP, flush=True)
        else:
            print(f"unknown command {cmd}; /help lists them.", flush=True)
        return None

    # -- saving -------------------------------------------------------------------------------------------------
    def _save(self, final: bool = False) -> None:
        task = {k: v for k, v in self.spec.as_dict().items() if k != "config"}
        status = self.state.get("exit_status")
        if final and status is None:
            status = "interrupted"  # the session ended while a task was still open (or before any task)
        traj = trajectory.build(task, self.config.as_dict(), self.state, exit_status=status, started=self.started)
        write_json_atomic(self.out / TRAJ_FILE, traj)

    def _finish(self) -> None:
        # a Ctrl-C that ended the session must not also stop the final `git diff` (its output pump checks it)
        interrupts.clear()
        try:
            patch = self.sandbox.diff() if getattr(self, "session", None) else ""
            if getattr(self, "session", None):
                write_text_atomic(self.out / PATCH_FILE, patch)
                self._save(final=True)
                print(f"session saved: {self.out / PATCH_FILE} ({patch.count(chr(10))} lines), "
                      f"{self.out / TRAJ_FILE}", flush=True)
        finally:
            self.sandbox.close()
            if getattr(self, "conn", None) is not None:
                self.conn.close()
