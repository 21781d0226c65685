"""The instance's pytest command, run so that nothing the model could edit configures the runner.

- plugin autoloading off (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1), PYTEST_ADDOPTS / PYTEST_PLUGINS unset;
- `-c` names a copy of the base commit's pytest configuration, written by the harness outside the work tree,
  with `--rootdir` / `--confcutdir` at the work tree (test ids and the conftest.py files stay the base's);
- no cache provider; a junit XML report written into the same harness directory, for the cross-check.

Only a plain pytest invocation is hardened (`[VAR=value ...] [python[3] -m] pytest ARGS`); a command with shell
operators or another runner is run as given, and the report says so.
"""

from __future__ import annotations

import configparser
import re
import shlex
import tomllib

from nexus.evals.swebench.tamper import GIT

# pytest's own search order for a configuration file in a directory.
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_SHELL = set(";&|<>`$()\n")


def split_pytest(cmd: str) -> tuple[list[str], list[str], list[str]] | None:
    """(env assignments, runner words, pytest args) of a plain pytest command, or None."""
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    if not words or any(_SHELL & set(w) for w in words):
        return None
    i = 0
    while i < len(words) and _ASSIGN.match(words[i]):
        i += 1
    if i == len(words):
        return None
    exe = words[i].rsplit("/", 1)[-1]
    if exe in ("pytest", "py.test"):
        return words[:i], words[i:i + 1], words[i + 1:]
    if _PYTHON.match(exe):
        j = i + 1
        while j < len(words) and words[j].startswith("-") and words[j] not in ("-m", "-c"):
            j += 1
        if words[j:j + 2] == ["-m", "pytest"]:
            return words[:i], words[i:j + 2], words[j + 2:]
    return None


def harden(cmd: str, *, workdir: str, config: str, junit: str) -> str | None:
    """The hardened form of `cmd`, or None when it is not a plain pytest command."""
    parts = split_pytest(cmd)
    if parts is None:
        return None
    assigns, runner, args = parts
    extra = ["-c", config, f"--rootdir={workdir}", f"--confcutdir={workdir}", "-p", "no:cacheprovider",
             f"--junitxml={junit}"]
    return ("env -u PYTEST_ADDOPTS -u PYTEST_PLUGINS PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
            + shlex.join(assigns + runner + extra + args))


def has_pytest_section(name: str, text: str) -> bool:
    try:
        if name in ("pytest.ini", ".pytest.ini"):
            return True  # pytest takes these even when empty
        if name == "pyproject.toml":
            return "ini_options" in tomllib.loads(text).get("tool", {}).get("pytest", {})
        cp = configparser.RawConfigParser()
        cp.read_string(text)
        return cp.has_section("pytest" if name == "tox.ini" else "tool:pytest")
    except (ValueError, configparser.Error):
        return False


def base_config(sandbox, base: str) -> tuple[str, str]:
    """(file name, text) of the configuration pytest would pick at the repository root on the base commit; an
    empty pytest.ini when there is none. Kept under its own name: pytest reads a file by its name."""
    for name in CONFIG_FILES:
        res = sandbox.execute(f"{GIT} show {shlex.quote(f'{base}:{name}')}", timeout=60)
        if res.returncode == 0 and has_pytest_section(name, res.output):
            return name, res.output
    return "pytest.ini", "[pytest]\n"
