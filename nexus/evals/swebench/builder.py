"""`nexus eval swebench build-tasks`: rebuild the bundled task set from its recipe.

Per bug: the pinned sdist (sha256-checked) is unpacked, the mutation applied, and the buggy tree committed as the
only commit of its own repository (`<repos>/<instance_id>`; one commit, so no history leaks the fix). The gold
patch is the diff that undoes the mutation, the test_patch the diff that adds the regression test. FAIL_TO_PASS
and PASS_TO_PASS come from running the tests in the library's environment image: once on the base commit with
the test patch, twice with gold + test patch; a test counts only if it behaved the same in both gold runs.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from nexus.errors import NexusError
from nexus.evals.swebench.environment import ensure_library_image, image_name, test_command
from nexus.evals.swebench.executors import run_parallel
from nexus.evals.swebench.grading import DEFAULT_EVAL_TYPE, DEFAULT_PARSER, status_map
from nexus.evals.swebench.harness import run_eval
from nexus.evals.swebench.instances import Instance
from nexus.evals.swebench.io import write_jsonl_atomic, write_text_atomic
from nexus.evals.swebench.recipe import Bug, Recipe, apply_mutation
from nexus.evals.swebench.repos import commit_tree, reset_tree, worktree_diff
from nexus.evals.swebench.sdist import fetch_sdist, unpack_sdist

PASSING = {"PASSED", "XFAIL"}
FAILING = {"FAILED", "ERROR"}


@dataclass
class BuildConfig:
    out: Path  # instances .jsonl
    repos: Path  # one repository per instance
    workers: int = 2
    only: list[str] = field(default_factory=list)
    logs: Path | None = None  # where the validation logs go (default: next to the repos)


@dataclass
class BuildResult:
    instances: list[Instance]
    failures: dict[str, str]


def make_repo(recipe: Recipe, bug: Bug, pristine: Path, repos: Path) -> tuple[Path, str, str, str]:
    """The bug's repository; returns (path, base_commit, gold patch, test patch)."""
    dest = repos / recipe.instance_id(bug)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(pristine, dest, symlinks=True)
    for op in bug.ops:
        apply_mutation(dest, op)
    lib = recipe.libraries[bug.library]
    sha = commit_tree(dest, author=recipe.author, date=recipe.date, message=f"{lib.name} {lib.version}")
    for op in reversed(bug.ops):
        apply_mutation(dest, op, reverse=True)
    gold = worktree_diff(dest)
    reset_tree(dest)
    test_file = dest / bug.test_path
    if test_file.exists():
        raise NexusError(f"Bug {bug.id}: {bug.test_path} already exists in {lib.name}; pick a new test file name.")
    test_file.parent.mkdir(parents=True, exist_ok=True)
    test_file.write_text(bug.test_content)
    test_patch = worktree_diff(dest)
    reset_tree(dest)
    return dest, sha, gold, test_patch


def _draft(recipe: Recipe, bug: Bug, sha: str, gold: str, test_patch: str) -> Instance:
    lib = recipe.libraries[bug.library]
    return Instance(
        instance_id=recipe.instance_id(bug),
        repo=recipe.repo_name(bug),
        base_commit=sha,
        problem_statement=bug.problem_statement,
        patch=gold,
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        test_patch=test_patch,
        hints_text=bug.hints_text,
        version=lib.version,
        environment_setup_commit=sha,
        created_at=bug.created_at,
        image=image_name(lib, recipe.environment),
        log_parser=DEFAULT_PARSER,
        eval_type=DEFAULT_EVAL_TYPE,
        test_cmd=test_command(lib, bug.test_path),
    )


def _statuses(draft: Instance, repo: Path, patch: str | None, timeout_s: float, log: Path) -> dict[str, str]:
    from nexus.sandbox import SandboxLimits, create_sandbox

    limits = SandboxLimits(max_output_bytes=16 << 20)
    with create_sandbox("docker", repo, base_commit=draft.base_commit, image=draft.image,
                        task_id=f"build-{draft.instance_id}", limits=limits) as sb:
        run = run_eval(sb, draft, patch, timeout_s=timeout_s)
    write_text_atomic(log, run.log)
    if not run.patch_applied:
        raise NexusError(f"{draft.instance_id}: a patch did not apply in the environment image; see {log}.")
    if run.test_exit_code not in (0, 1):  # pytest: 1 = tests failed; 2-5 = no verdict at all (usage, no tests)
        raise NexusError(f"{draft.instance_id}: the test command exited {run.test_exit_code} in the environment "
                         f"image, so no test verdict came out: the environment is broken (a missing plugin or "
                         f"package?); see {log}.")
    return status_map(draft, run.log)


def validate_bug(recipe: Recipe, bug: Bug, draft: Instance, repo: Path, logs: Path) -> Instance:
    t = recipe.environment.test_timeout_s
    d = logs / draft.instance_id
    before = _statuses(draft, repo, None, t, d / "before.log")
    after = _statuses(draft, repo, draft.patch, t, d / "gold-1.log")
    again = _statuses(draft, repo, draft.patch, t, d / "gold-2.log")
    stable = {k for k, v in after.items() if again.get(k) == v}
    f2p = sorted(k for k in stable if after[k] in PASSING and before.get(k, "FAILED") in FAILING)
    p2p = sorted(k for k in stable if after[k] in PASSING and before.get(k) in PASSING)
    if not f2p:
        raise NexusError(f"{draft.instance_id}: no test fails before the fix and passes after it; the mutation "
                         f"is not caught (logs in {d}).")
    new_tests = [k for k in after if k.startswith(bug.test_path + "::")]
    if not new_tests:
        raise NexusError(f"{draft.instance_id}: the regression test {bug.test_path} did not run (logs in {d}).")
    return replace(draft, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p)


def build_tasks(recipe: Recipe, cfg: BuildConfig, *, progress: bool = True) -> BuildResult:
    bugs = [b for b in recipe.bugs if not cfg.only or b.id in cfg.only or recipe.instance_id(b) in cfg.only]
    unknown = set(cfg.only) - {b.id for b in bugs} - {recipe.instance_id(b) for b in bugs}
    if unknown:
        raise NexusError(f"Unknown bug ids {sorted(unknown)}; see the `id` fields in {recipe.path}.")
    cfg.repos.mkdir(parents=True, exist_ok=True)
    logs = cfg.logs or cfg.repos.parent / "build-logs"
    work = Path(tempfile.mkdtemp(prefix="nexus-tasks-"))
    try:
        pristine: dict[str, Path] = {}
        for name in sorted({b.library for b in bugs}):
            lib = recipe.libraries[name]
            pristine[name] = unpack_sdist(fetch_sdist(lib), work / name)
            ensure_library_image(lib, recipe.environment)
        built: dict[str, Instance] = {}
        failures: dict[str, str] = {}

        def one(bug: Bug) -> str:
            try:
                repo, sha, gold, test_patch = make_repo(recipe, bug, pristine[bug.library], cfg.repos)
                built[bug.id] = validate_bug(recipe, bug, _draft(recipe, bug, sha, gold, test_patch), repo, logs)
                return "valid"
            except NexusError as e:
                failures[bug.id] = str(e)
                return "invalid"

        run_parallel(one, bugs, workers=cfg.workers, desc="building tasks", progress=progress,
                     key=lambda b: b.id)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    instances = [built[b.id] for b in bugs if b.id in built]  # recipe order: same bytes on every rebuild
    rows = [i.to_row() for i in instances]
    if cfg.only and cfg.out.exists():
        rows = merge_rows(recipe, rows, cfg.out)
    write_jsonl_atomic(cfg.out, rows)
    return BuildResult(instances, failures)


def merge_rows(recipe: Recipe, rows: list[dict], existing: Path) -> list[dict]:
    """A partial rebuild replaces its own rows and keeps the others, in recipe order (never truncates a set)."""
    from nexus.evals.swebench.instances import read_rows

    new = {r["instance_id"]: r for r in rows}
    old = {r["instance_id"]: r for r in read_rows(existing) if isinstance(r, dict) and "instance_id" in r}
    order = [recipe.instance_id(b) for b in recipe.bugs]
    order += [i for i in old if i not in order]
    return [new.get(i) or old[i] for i in order if i in new or i in old]
