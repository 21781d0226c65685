"""The same per-instance runner on a Ray cluster (`--executor ray --address ...`), for runs that outgrow one box.

Each instance is one Ray task (1 CPU by default) calling `runner.solve_instance`. Every node needs nexus, a
docker engine, the repositories mirror and the output directory at the same paths (shared storage); the done
records also come back to the driver, which writes them again, so predictions.jsonl is complete even when a node's
disk is not shared. Without `--address` a local Ray instance is started (and stopped at the end).
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from tqdm import tqdm

from nexus.errors import NexusError
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.io import write_json_atomic


def _solve(instance: Instance, cfg: Any) -> tuple[str, dict[str, Any] | None, str | None]:
    from nexus.evals.swebench.runner import solve_instance

    try:
        rec = solve_instance(instance, cfg)
        return rec["exit_status"] or "stopped", rec, None
    except Exception as e:  # reported to the driver; the instance stays unfinished
        return "crashed", None, f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"


def run_on_ray(todo: list[Instance], cfg: Any, *, address: str | None = None, progress: bool = True,
               cpus_per_task: float = 1.0) -> dict[str, str]:
    try:
        import ray
    except ImportError:
        raise NexusError("The ray executor needs Ray: pip install 'nexus[eval]', or use --executor local.") from None
    from nexus.evals.swebench.runner import DONE

    started_here = not ray.is_initialized()
    if started_here:
        root = str(Path(__file__).resolve().parents[3])  # nexus importable in local workers, installed or not
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": root}})
        except ConnectionError as e:
            raise NexusError(f"Could not connect to the Ray cluster at {address} ({e}); check --address.") from None
    outcomes: dict[str, str] = {}
    try:
        task = ray.remote(num_cpus=cpus_per_task, max_retries=0)(_solve)
        pending = {task.remote(inst, cfg): inst for inst in todo}
        with tqdm(total=len(pending), desc="agent (ray)", disable=not progress or not pending, unit="inst") as bar:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    inst = pending.pop(ref)
                    try:
                        outcome, rec, err = ray.get(ref)
                    except Exception as e:  # the worker itself died (OOM, node lost)
                        outcome, rec, err = "crashed", None, f"{type(e).__name__}: {e}"
                    d = cfg.out_dir / "trajectories" / inst.instance_id
                    if rec is not None:
                        write_json_atomic(d / DONE, rec)
                    elif err:
                        d.mkdir(parents=True, exist_ok=True)
                        (d / "error.txt").write_text(err)
                    outcomes[inst.instance_id] = outcome
                    bar.update(1)
    finally:
        if started_here:
            ray.shutdown()
    return outcomes
