"""`pip install nexus` without `nexus[eval]`: the runtime, agent, sandbox and serve import without swebench, ray and
matplotlib, and an eval command that needs one says, in one sentence, to install the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nexus.extras import EVAL_MODULES

# A finder first on sys.meta_path makes the eval-only packages look uninstalled, as in a runtime-only install.
BLOCK = f"""
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {set(EVAL_MODULES)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _NotInstalled())
"""

IMPORT_ALL = """
import importlib, pkgutil
import nexus.agent, nexus.runtime, nexus.sandbox, nexus.serve, nexus.cli
for pkg in (nexus.agent, nexus.runtime, nexus.sandbox, nexus.serve):
    for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(mod.name)
from nexus.runtime import InferenceStream, load_model, make_policy  # the lazily resolved names too
print(sorted(m for m in sys.modules if m.split('.')[0] in {blocked!r}))
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True, timeout=300)


def test_runtime_agent_sandbox_and_serve_import_without_the_eval_extras():
    run = _python(IMPORT_ALL.format(blocked=set(EVAL_MODULES)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("command, module", [
    (("eval", "swebench", "grade", "--predictions", "gold", "-o"), "swebench"),  # fails at its first import
    (("eval", "swebench", "run", "-o"), "swebench"),  # grades at the end: refused before any instance runs
    (("eval", "kv", "--suite", "fidelity", "--out"), "matplotlib"),  # plots at the end: refused up front
])
def test_an_eval_command_without_the_extras_says_what_to_install(tmp_path, command, module):
    out = tmp_path / "out"
    run = _python("import sys; from nexus.cli import main; sys.argv[0] = 'nexus'; main()", *command, str(out))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"nexus: error: {module} is not installed; this command needs the eval extras: pip install 'nexus[eval]'."]
    assert not out.exists()
