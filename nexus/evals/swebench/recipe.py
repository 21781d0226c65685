"""The task-set recipe (data/tasks/recipe.yaml): pinned sdists and each bug as find/replace mutations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from nexus.errors import NexusError

DEFAULT_RECIPE = Path(__file__).resolve().parents[3] / "data" / "tasks" / "recipe.yaml"


@dataclass(frozen=True)
class Library:
    name: str
    version: str
    sha256: str
    import_root: str  # directory that goes on sys.path ("." or "src")
    tests: str  # test paths the eval runs, relative to the repo root
    pip: tuple[str, ...] = ()  # this library's own test requirements, on top of the environment's

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Mutation:
    file: str
    find: str
    replace: str


@dataclass(frozen=True)
class Bug:
    id: str
    library: str
    created_at: str
    ops: tuple[Mutation, ...]
    problem_statement: str
    test_path: str
    test_content: str
    hints_text: str = ""


@dataclass(frozen=True)
class Environment:
    python: str
    pip: tuple[str, ...] = ()  # every library's test requirements
    test_timeout_s: int = 300


def requirement_name(requirement: str) -> str:
    """The distribution a pip requirement names, normalized as PyPI does (PEP 503): `Py_Test>=8` -> `py-test`."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not m:
        raise NexusError(f"Recipe pip entry {requirement!r} names no distribution; write it as pip would, "
                         "e.g. `pytest==8.3.5`.")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def library_requirements(lib: Library, env: Environment) -> tuple[str, ...]:
    """What pip installs into `lib`'s image: the environment's list, where the library's own entries replace
    those naming the same distribution (a library may need another pytest) and add the rest."""
    own = {requirement_name(r): r for r in lib.pip}
    kept = [r for r in env.pip if requirement_name(r) not in own]
    return tuple(kept) + tuple(lib.pip)


@dataclass(frozen=True)
class Recipe:
    owner: str
    author: str
    date: str
    environment: Environment
    libraries: dict[str, Library]
    bugs: tuple[Bug, ...] = field(default_factory=tuple)
    path: Path | None = None

    def instance_id(self, bug: Bug) -> str:
        return f"{self.owner}__{bug.id}"

    def repo_name(self, bug: Bug) -> str:
        return f"{self.owner}/{bug.library}"


def load_recipe(path: str | Path = DEFAULT_RECIPE) -> Recipe:
    p = Path(path)
    if not p.is_file():
        raise NexusError(f"Recipe {p} does not exist; pass --recipe with the path of a task-set recipe YAML.")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise NexusError(f"Recipe {p} is not valid YAML ({str(e).splitlines()[0]}); fix the file.") from None
    try:
        env = raw["environment"]
        libs = {
            name: Library(name, str(d["version"]), d["sha256"], d.get("import_root", "."), d["tests"],
                          _pip_list(d.get("pip", []), p, f"library {name}"))
            for name, d in raw["libraries"].items()
        }
        bugs = []
        for b in raw["bugs"]:
            if b["library"] not in libs:
                raise NexusError(f"Recipe bug {b['id']} names library {b['library']!r}, which the recipe lacks.")
            ops = tuple(Mutation(o["file"], o["find"], o["replace"]) for o in b["ops"])
            bugs.append(
                Bug(
                    id=b["id"],
                    library=b["library"],
                    created_at=b["created_at"],
                    ops=ops,
                    problem_statement=b["problem_statement"],
                    test_path=b["test"]["path"],
                    test_content=b["test"]["content"],
                    hints_text=b.get("hints_text", ""),
                )
            )
        ids = [b.id for b in bugs]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise NexusError(f"Recipe {p} has duplicate bug ids {dupes}; give every bug its own id.")
        return Recipe(
            owner=raw["owner"],
            author=raw["commit"]["author"],
            date=raw["commit"]["date"],
            environment=Environment(str(env["python"]), _pip_list(env.get("pip", []), p, "environment"),
                                    int(env.get("test_timeout_s", 300))),
            libraries=libs,
            bugs=tuple(bugs),
            path=p,
        )
    except (KeyError, TypeError) as e:
        raise NexusError(f"Recipe {p} is missing a field ({e}); compare it with data/tasks/recipe.yaml.") from None


def _pip_list(value, path: Path, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(r, str) and r.strip() for r in value):
        raise NexusError(f"Recipe {path}: `pip` of {where} must be a list of requirement strings "
                         "(e.g. [\"pytest==8.3.5\"]); fix that entry.")
    for r in value:
        requirement_name(r)
    return tuple(value)


def apply_mutation(root: Path, op: Mutation, *, reverse: bool = False) -> None:
    """Apply one find/replace edit in place; the text to find must occur exactly once (else the recipe is stale)."""
    path = root / op.file
    if not path.is_file():
        raise NexusError(f"Mutation target {op.file} does not exist in {root}; the recipe does not match the sdist.")
    old, new = (op.replace, op.find) if reverse else (op.find, op.replace)
    text = path.read_text()
    n = text.count(old)
    if n != 1:
        raise NexusError(
            f"Mutation text for {op.file} occurs {n} times (must be exactly once); fix the recipe's `find`."
        )
    path.write_text(text.replace(old, new, 1))
