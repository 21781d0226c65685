"""`nexus eval swebench run`: the agent on each instance, in its own container, resumable.

Layout of a run directory:
  run_config.json                  the configuration (a rerun with another one is refused)
  predictions.jsonl                official format, rewritten atomically from the finished instances
  trajectories/<instance_id>/      the agent's task.json, trajectory.json, patch.diff (+ done.json when finished;
                                   + <instance_id>.traj.json with --trajectory-format mini-swe-agent)
  grade/                           `grade` output for predictions.jsonl (with --grade)
An instance is finished when its done.json exists; a rerun skips it. A partial directory (killed mid-instance)
is started again from scratch. An exception in one instance is recorded in its error.txt and never stops the rest.
"""

from __future__ import annotations

import json
import shutil
import threading
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.io import write_json_atomic, write_text_atomic
from nexus.evals.swebench.predictions import Prediction, write_predictions

DONE = "done.json"
CONFIG_KEYS = ("model", "policy", "budget", "protocol", "max_steps", "max_wall_s", "chunk_size", "max_new_tokens",
               "reply_prefix", "policy_params", "dtype")
# keys added after run dirs were first written, with the value those runs used
LATER_KEYS = {"reply_prefix": "", "policy_params": {}, "dtype": None}


@dataclass
class RunConfig:
    out_dir: Path
    model: str = "embedded"
    policy: str = "nexus"
    budget: int | str = 1024  # tokens per layer or a byte size ("64MiB")
    protocol: str = "stream"
    max_steps: int = 15
    max_wall_s: float = 900.0
    chunk_size: int = 256
    max_new_tokens: int = 384
    reply_prefix: str = ""  # every reply starts with this text (e.g. "```bash\n" for tiny models)
    workers: int = 1
    executor: str = "local"
    address: str | None = None
    repos: Path | None = None
    repo_url: str | None = None
    trajectory_format: str = "nexus"  # "mini-swe-agent" also writes trajectories/<id>/<id>.traj.json
    policy_params: dict[str, Any] = field(default_factory=dict)  # -p KEY=VALUE
    device: str | None = None
    dtype: str | None = None

    @property
    def model_name(self) -> str:
        if self.model.startswith("replay-run:"):
            model = "replay-" + Path(self.model.split(":", 1)[1]).name
        else:
            model = Path(self.model).name if "/" in self.model else self.model
        return f"nexus__{model}__{self.policy}__b{self.budget}__{self.protocol}"

    def identity(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in CONFIG_KEYS} | {"model_name_or_path": self.model_name}


def _check_config(cfg: RunConfig) -> None:
    path = cfg.out_dir / "run_config.json"
    want = cfg.identity()
    if path.exists():
        have = json.loads(path.read_text())
        for key, value in LATER_KEYS.items():  # run dirs written before the option existed
            have.setdefault(key, value)
        if have != want:
            diff = sorted(k for k in want if have.get(k) != want[k])
            raise NexusError(f"{cfg.out_dir} holds a run with a different configuration ({', '.join(diff)}); "
                             "resume with the same options or pass another -o DIR.")
    else:
        write_json_atomic(path, want)


def agent_model(cfg: RunConfig, instance: Instance) -> str:
    """`replay-run:DIR` replays, per instance, the assistant turns recorded in another run directory through the
    embedded model's stream (the agent's `replay:` backend): the same actions under another policy, budget or
    protocol, so the cache numbers differ and are real, while the decisions (and so the patches) are the
    recorded ones."""
    if not cfg.model.startswith("replay-run:"):
        return cfg.model
    traj = Path(cfg.model.split(":", 1)[1]) / "trajectories" / instance.instance_id / "trajectory.json"
    if not traj.exists():
        raise NexusError(f"{traj} does not exist; replay-run: needs a run directory that covered "
                         f"{instance.instance_id}.")
    return f"replay:{traj}"


def solve_instance(instance: Instance, cfg: RunConfig) -> dict[str, Any]:
    """Run the agent once; returns the done record (prediction + outcome). Raises only on setup errors."""
    from nexus.agent.config import AgentConfig, Limits
    from nexus.agent.repo import RepoSource
    from nexus.agent.run import TaskSpec, run_task
    from nexus.evals.swebench.environment import ensure_instance_image
    from nexus.evals.swebench.repos import find_repo

    d = cfg.out_dir / "trajectories" / instance.instance_id
    if d.exists():
        shutil.rmtree(d)  # a partial run from a killed process: start it again
    image = ensure_instance_image(instance)
    repo = find_repo(instance, mirror=cfg.repos, url_template=cfg.repo_url)
    agent_cfg = AgentConfig(limits=Limits(max_steps=cfg.max_steps, max_wall_seconds=cfg.max_wall_s),
                            protocol=cfg.protocol, max_new_tokens=cfg.max_new_tokens, reply_prefix=cfg.reply_prefix)
    spec = TaskSpec(repo=str(repo), commit=instance.base_commit, issue=instance.problem_statement,
                    issue_source=f"swebench:{instance.instance_id}", model=agent_model(cfg, instance),
                    policy=cfg.policy,
                    budget=cfg.budget, chunk_size=cfg.chunk_size, sandbox="docker", image=image,
                    config=agent_cfg.as_dict(), thread_id=f"swe-{instance.instance_id}",
                    trajectory_format=cfg.trajectory_format, policy_params=dict(cfg.policy_params),
                    device=cfg.device, dtype=cfg.dtype)
    outcome = run_task(spec, RepoSource(path=repo, commit=instance.base_commit, origin=str(repo)), d)
    patch = outcome.patch_path.read_text(encoding="utf-8") if outcome.patch_path.exists() else ""
    totals = outcome.trajectory.get("totals", {})
    record = {
        "prediction": Prediction(instance.instance_id, cfg.model_name, patch).to_row(),
        "exit_status": outcome.exit_status,
        "error": outcome.error,
        "totals": totals,
    }
    write_json_atomic(d / DONE, record)
    return record


def finished_records(out_dir: Path) -> dict[str, dict[str, Any]]:
    records = {}
    for done in sorted((out_dir / "trajectories").glob(f"*/{DONE}")):
        try:
            rec = json.loads(done.read_text())
            records[rec["prediction"]["instance_id"]] = rec
        except (OSError, ValueError, KeyError):
            continue  # a torn marker counts as unfinished (os.replace makes this unlikely)
    return records


def _write_predictions(cfg: RunConfig, order: list[str]) -> None:
    recs = finished_records(cfg.out_dir)
    preds = [Prediction(**recs[i]["prediction"]) for i in order if i in recs]
    preds += [Prediction(**r["prediction"]) for i, r in recs.items() if i not in set(order)]
    write_predictions(cfg.out_dir / "predictions.jsonl", preds)


def run(instances: list[Instance], cfg: RunConfig, *, instances_path: Path | None = None,
        grade_after: bool = True, progress: bool = True) -> dict[str, Any]:
    from nexus.agent.config import PROTOCOLS

    if cfg.protocol not in PROTOCOLS:
        raise NexusError(f"Unknown cache protocol {cfg.protocol!r}; use one of: {', '.join(PROTOCOLS)}.")
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    _check_config(cfg)
    order = [i.instance_id for i in instances]
    done = finished_records(cfg.out_dir)
    todo = [i for i in instances if i.instance_id not in done]
    lock = threading.Lock()

    progress_made = threading.Event()

    def work(inst: Instance) -> str:
        try:
            rec = solve_instance(inst, cfg)
            outcome = rec["exit_status"] or "stopped"
            progress_made.set()
        except Exception as e:  # recorded; the instance stays unfinished and is retried on the next run
            d = cfg.out_dir / "trajectories" / inst.instance_id
            write_text_atomic(d / "error.txt", f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}")
            if isinstance(e, NexusError) and not progress_made.is_set() and not done:
                # Nothing has worked yet and the user's input is at fault (a budget the policy cannot use, a
                # missing image...): every other instance would fail the same way, so say it once and stop.
                raise
            outcome = "crashed"
        with lock:
            _write_predictions(cfg, order)
        return outcome

    if cfg.executor == "ray":
        from nexus.evals.swebench.ray_executor import run_on_ray

        outcomes = run_on_ray(todo, cfg, address=cfg.address, progress=progress)
        _write_predictions(cfg, order)
    elif cfg.executor == "local":
        from nexus.evals.swebench.executors import run_parallel

        outcomes = run_parallel(work, todo, workers=cfg.workers, desc="agent", progress=progress,
                                key=lambda i: i.instance_id)
        _write_predictions(cfg, order)
    else:
        raise NexusError(f"Unknown executor {cfg.executor!r}; use `local` or `ray`.")
    summary: dict[str, Any] = {
        "out_dir": str(cfg.out_dir),
        "model_name_or_path": cfg.model_name,
        "instances": len(instances),
        "skipped_finished": len(instances) - len(todo),
        "ran": len(todo),
        "outcomes": {k: sum(1 for v in outcomes.values() if v == k) for k in sorted(set(outcomes.values()))},
        "predictions": str(cfg.out_dir / "predictions.jsonl"),
    }
    if grade_after:
        from nexus.evals.swebench.grade import GradeConfig, grade
        from nexus.evals.swebench.predictions import load_predictions

        preds = load_predictions(cfg.out_dir / "predictions.jsonl")
        gcfg = GradeConfig(out_dir=cfg.out_dir / "grade", repos=cfg.repos, repo_url=cfg.repo_url,
                           workers=max(1, cfg.workers))
        report = grade([i for i in instances if i.instance_id in preds], preds, gcfg, progress=progress)
        summary["resolved"] = f"{report['resolved_instances']}/{len(instances)}"
        summary["empty_patches"] = report["empty_patch_instances"]
    write_json_atomic(cfg.out_dir / "run_summary.json", summary | {"config": asdict(cfg) | {
        "out_dir": str(cfg.out_dir), "repos": str(cfg.repos) if cfg.repos else None}})
    return summary
