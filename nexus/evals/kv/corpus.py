"""Real long texts: source files of installed Python packages and transcripts of real commands.

Transcripts come from a small real git repository built at run time (real source files copied from an installed
package, a real test file, commits with fixed dates) on which `ls -R`, `cat`, `pytest -v` and `git log -p` really
run. Volatile bits (the temp path, test durations) are normalised so the same seed gives the same text.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nexus.errors import NexusError

# Packages every nexus install has (they are dependencies); their sources are the code haystacks.
SOURCE_PACKAGES = ("transformers", "torch", "typer", "rich", "click", "git", "docker", "tqdm", "langgraph", "numpy")
SPLITS = ("all", "dev", "test")  # dev and test: disjoint halves of SOURCE_PACKAGES and their own seeds
REPO_PATH = "/work/repo"  # what the temp repository's path is rewritten to in transcripts
MAX_DOC_CHARS = 160_000

MODULE = '''"""Small numeric helpers used by the report scripts."""


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def clamp(x, low, high):
    return max(low, min(high, x))


def moving_average(values, window):
    out = []
    for i in range(len(values) - window + 1):
        out.append(mean(values[i : i + window]))
    return out
'''

TESTS = '''from mathutils import clamp, mean, moving_average


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]


def test_mean_empty():
    assert mean([]) == 0
'''


def split_packages(split: str) -> tuple[str, ...]:
    """The packages a split draws its texts from: dev and test never share a source file."""
    if split not in SPLITS:
        raise NexusError(f"Unknown split {split!r}; use one of {', '.join(SPLITS)}.")
    return {"all": SOURCE_PACKAGES, "dev": SOURCE_PACKAGES[0::2], "test": SOURCE_PACKAGES[1::2]}[split]


def split_seed(tag: str, seed: int, split: str) -> str:
    """An RNG seed string per split; "all" keeps the historical string, so earlier items are rebuilt unchanged."""
    return f"{tag}-{seed}" if split == "all" else f"{tag}-{split}-{seed}"


@dataclass(frozen=True)
class Document:
    name: str  # e.g. "src:transformers" or "shell:typer"
    text: str


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def package_sources(name: str, min_chars: int = 2000) -> list[Path]:
    """The package's .py files of useful size, in a stable order."""
    root = package_dir(name)
    if root is None:
        return []
    files = [p for p in sorted(root.rglob("*.py")) if "test" not in p.parts and p.stat().st_size >= min_chars]
    return files


def source_document(name: str, rng: random.Random, max_chars: int = MAX_DOC_CHARS) -> Document | None:
    """Consecutive source files of one package (from a seeded start), each under a `# file:` header."""
    files = package_sources(name)
    if not files:
        return None
    start = rng.randrange(len(files))
    parts, size, root = [], 0, package_dir(name)
    for path in files[start:] + files[:start]:
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(f"# file: {name}/{path.relative_to(root)}\n{text}\n")
        size += len(parts[-1])
        if size >= max_chars:
            break
    return Document(f"src:{name}", "".join(parts)[:max_chars])


def source_documents(seed: int, count: int = 6, split: str = "all") -> list[Document]:
    rng = random.Random(split_seed("sources", seed, split))
    names = [n for n in split_packages(split) if package_sources(n)]
    if not names:
        raise NexusError("No installed package sources were found to build haystacks from; reinstall nexus.")
    rng.shuffle(names)
    docs = [source_document(n, rng) for n in names[:count]]
    return [d for d in docs if d is not None]


# --- a real repository and real commands ------------------------------------------------------------------------
_DURATION = re.compile(r"\b\d+\.\d+s\b")


def normalise(text: str, repo: Path) -> str:
    text = text.replace(str(repo), REPO_PATH)
    return _DURATION.sub("0.01s", text)


def _git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def make_repo(root: Path, package: str, seed: int, files: int = 3) -> Path:
    """A git repo with `files` real source files of `package`, a small module, its tests and three commits."""
    rng = random.Random(f"repo-{package}-{seed}")
    sources = [p for p in package_sources(package, min_chars=3000) if p.stat().st_size < 40_000]
    if len(sources) < files:
        raise NexusError(f"Package {package!r} has too few source files to build a test repository from.")
    chosen = sorted(rng.sample(sources, files))
    repo = root / f"repo-{package}"
    if repo.exists():
        shutil.rmtree(repo)
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada Dev", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada Dev", "GIT_COMMITTER_EMAIL": "ada@example.com"}
    _git(repo, "init", "-q", "-b", "main")

    def commit(message: str, day: int) -> None:
        stamp = f"2026-03-{day:02d}T10:00:00+0000"
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", message, env={**env, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})

    for path in chosen:
        shutil.copy(path, repo / "src" / path.name)
    (repo / "README.md").write_text(f"# {package}-tools\n\nVendored modules from {package} and small helpers.\n")
    commit(f"Vendor {len(chosen)} modules from {package}", 2)
    (repo / "mathutils.py").write_text(MODULE)
    commit("Add numeric helpers", 5)
    (repo / "tests" / "test_mathutils.py").write_text(TESTS)
    commit("Add tests for the numeric helpers", 9)
    return repo


def run_command(repo: Path, command: str, timeout: int = 120) -> tuple[int, str]:
    """Run a shell command in the repo (real process), return (exit code, normalised stdout+stderr)."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTEST_ADDOPTS": "", "COLUMNS": "100", "NO_COLOR": "1"}
    env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.run(["bash", "-c", command], cwd=repo, capture_output=True, text=True, timeout=timeout, env=env)
    return proc.returncode, normalise(proc.stdout + proc.stderr, repo)


def pytest_command() -> str:
    return f"{sys.executable} -m pytest -v -p no:cacheprovider -o addopts= tests"


def transcript_commands(repo: Path) -> list[str]:
    srcs = sorted(p.name for p in (repo / "src").iterdir())
    return ["ls -R", "cat README.md", f"cat src/{srcs[0]}", "cat mathutils.py", pytest_command(),
            f"cat src/{srcs[1]}", "git log -p"]


def transcript_document(root: Path, package: str, seed: int) -> Document:
    repo = make_repo(root, package, seed)
    parts = []
    for command in transcript_commands(repo):
        rc, output = run_command(repo, command)
        shown = command.replace(sys.executable, "python")
        parts.append(f"$ {shown}\n{output}" + ("" if output.endswith("\n") else "\n") + (f"[exit {rc}]\n" if rc else ""))
    return Document(f"shell:{package}", "".join(parts)[:MAX_DOC_CHARS])


def transcript_documents(seed: int, count: int = 3, split: str = "all") -> list[Document]:
    rng = random.Random(split_seed("transcripts", seed, split))
    names = [n for n in split_packages(split) if len(package_sources(n, 3000)) >= 3]
    rng.shuffle(names)
    with tempfile.TemporaryDirectory(prefix="nexus-kv-corpus-") as tmp:
        return [transcript_document(Path(tmp), n, seed) for n in names[:count]]


@functools.lru_cache(maxsize=4)
def corpus(seed: int, split: str = "all") -> tuple[Document, ...]:
    """Source documents and transcripts interleaved, so consecutive items alternate between the two kinds.
    Cached per process: building the transcripts runs real commands (pytest, git) and takes seconds."""
    src, shell = source_documents(seed, split=split), transcript_documents(seed, split=split)
    out: list[Document] = []
    for i in range(max(len(src), len(shell))):
        out += [d[i] for d in (src, shell) if i < len(d)]
    return tuple(out)
