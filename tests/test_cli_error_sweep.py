"""Issue 14 section 3: one error path. Every command, given a bad input a user can type, prints one sentence on
stderr, exits 2, creates no output directory and loads no model weights (the checks come first). Through the real
entry point (`nexus.cli.main`), in-process."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.conftest import LOCAL


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A repo, a script, a regular file to put -o under, a model dir without a tokenizer; weights never load."""
    import transformers

    from nexus.agent.examples import make_example_repo
    from nexus.runtime.model_loading import embedded_model_dir

    def no_weights(*args, **kwargs):
        raise AssertionError("model weights were loaded before the bad input was refused")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    monkeypatch.setenv("NEXUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # an engine that cannot answer
    monkeypatch.chdir(tmp_path)
    repo = make_example_repo()
    (tmp_path / "script.json").write_text(json.dumps(["```bash\nsubmit\n```"]))
    (tmp_path / "afile").write_text("a regular file\n")
    no_tok = tmp_path / "model-without-tokenizer"
    no_tok.mkdir()
    shutil.copy(embedded_model_dir() / "config.json", no_tok / "config.json")
    (tmp_path / "text.txt").write_text("some text to stream\n")
    (tmp_path / "bad-shape.json").write_text(json.dumps({"format": "nexus-trajectory/1", "steps": "x"}))
    (tmp_path / "a-run").mkdir()
    yield {"repo": str(repo.path), "script": f"scripted:{tmp_path / 'script.json'}", "no_tok": str(no_tok)}
    repo.cleanup()


def _main(monkeypatch, capsys, args):
    from nexus.cli import main

    monkeypatch.setattr(sys, "argv", ["nexus", *map(str, args)])
    with pytest.raises(SystemExit) as exit_:
        main()
    captured = capsys.readouterr()
    return exit_.value.code, captured.err


OUT = "out"  # every command below writes here when it runs; a refused one must not create it
UNDER_A_FILE = "afile/out"

SOLVE = ["solve", "--repo", "{repo}", "--issue", "fix add", "--model", "{script}", "--sandbox", LOCAL]
REPL = ["repl", "--repo", "{repo}", "--model", "{script}", "--sandbox", LOCAL]
RUN = ["eval", "swebench", "run", "--ids", "nexus-tasks__parse-1", "--model", "{script}", "--no-grade"]
STREAM = ["stream", "text.txt", "--max-new-tokens", "1"]

CASES = [
    # -o / --out that cannot be created
    (SOLVE + ["-o", UNDER_A_FILE], "cannot be created"),
    (REPL + ["-o", UNDER_A_FILE], "cannot be created"),
    (RUN + ["-o", UNDER_A_FILE], "cannot be created"),
    (["eval", "swebench", "grade", "--predictions", "gold", "-o", UNDER_A_FILE], "cannot be created"),
    (["eval", "swebench", "compare", "a-run", "-o", "afile/x/cmp"], "cannot be created"),
    (["eval", "kv", "--suite", "fidelity", "--out", UNDER_A_FILE], "cannot be created"),
    (["demo", "-o", UNDER_A_FILE], "cannot be created"),
    # policy, parameters and budget (the scripted backend too)
    (SOLVE + ["--policy", "bogus", "--budget", "-5", "-o", OUT], "must be positive"),
    (SOLVE + ["--budget", "-5", "-o", OUT], "must be positive"),
    (SOLVE + ["--budget", "lots", "-o", OUT], "is not a token count"),
    (SOLVE + ["-p", "foo=bar", "-o", OUT], "has no parameter 'foo'"),
    (SOLVE + ["-p", "b=notanint", "-o", OUT], "block_size must be int"),
    (SOLVE + ["--model", "embedded", "--budget", "40", "-o", OUT], "raise the budget"),
    (SOLVE + ["--max-new-tokens", "0", "-o", OUT], "max-new-tokens"),
    (REPL + ["--policy", "bogus", "--budget", "-5", "-o", OUT], "must be positive"),
    (REPL + ["--budget", "64MiBs", "-o", OUT], "is not a token count"),
    (REPL + ["-p", "foo=bar", "-o", OUT], "has no parameter 'foo'"),
    (REPL + ["--mode", "weird", "-o", OUT], "unknown mode"),
    (RUN + ["--policy", "bogus", "-o", OUT], "Unknown policy 'bogus'"),
    (RUN + ["--budget", "-5", "-o", OUT], "must be positive"),
    (RUN + ["-p", "foo=bar", "-o", OUT], "has no parameter 'foo'"),
    (RUN + ["--protocol", "weird", "-o", OUT], "Unknown cache protocol"),
    (STREAM + ["--policy", "bogus"], "Unknown policy 'bogus'"),
    (STREAM + ["--budget", "-5"], "must be positive"),
    (STREAM + ["-p", "foo=bar"], "has no parameter 'foo'"),
    (STREAM + ["--max-new-tokens", "0"], "max-new-tokens"),
    (["demo", "--policy", "bogus", "-o", OUT], "Unknown policy 'bogus'"),
    # device and dtype
    (SOLVE + ["--device", "tpu9", "-o", OUT], "Unknown device"),
    (SOLVE + ["--dtype", "int3", "-o", OUT], "Unknown dtype"),
    (REPL + ["--dtype", "int3", "-o", OUT], "Unknown dtype"),
    (RUN + ["--device", "tpu9", "-o", OUT], "Unknown device"),
    (STREAM + ["--dtype", "int3"], "Unknown dtype"),
    # a model directory without a tokenizer
    (SOLVE + ["--model", "{no_tok}", "-o", OUT], "holds no tokenizer"),
    (REPL + ["--model", "{no_tok}", "-o", OUT], "holds no tokenizer"),
    (RUN + ["--model", "{no_tok}", "-o", OUT], "holds no tokenizer"),
    (STREAM + ["--model", "{no_tok}"], "holds no tokenizer"),
    # sandbox: an unknown kind, an engine that does not answer
    (SOLVE + ["--sandbox", "bogus", "-o", OUT], "Unknown sandbox kind 'bogus'"),
    (SOLVE + ["--sandbox", "docker", "-o", OUT], "No docker engine answers"),
    (REPL + ["--sandbox", "bogus", "-o", OUT], "Unknown sandbox kind 'bogus'"),
    (REPL + ["--sandbox", "docker", "-o", OUT], "No docker engine answers"),
    (RUN + ["-o", OUT], "No docker engine answers"),
    (["sandbox", "run", "{repo}", "ls", "--sandbox", "bogus"], "Unknown sandbox kind 'bogus'"),
    (["sandbox", "run", "nope", "ls", "--sandbox", LOCAL], "does not exist"),
    (["sandbox", "ls"], "No docker engine answers"),
    # inspect: the right format field over the wrong contents
    (["inspect", "bad-shape.json"], "do not have that shape"),
]


@pytest.mark.parametrize("args, needle", CASES, ids=[" ".join(a[:3]) + " | " + n for a, n in CASES])
def test_every_command_refuses_bad_input_in_one_sentence(env, monkeypatch, capsys, tmp_path, args, needle):
    rc, err = _main(monkeypatch, capsys, [a.format(**env) for a in args])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / OUT).exists(), "a refused command must not create its output directory"
    assert not (tmp_path / "home" / "sessions").exists()


def test_an_issue_that_reads_like_a_missing_file_says_what_it_was_taken_as(env, monkeypatch, capsys, tmp_path):
    rc, err = _main(monkeypatch, capsys, [a.format(**env) for a in SOLVE] + ["--issue", "m.py", "-o", OUT, "-q"])
    assert rc == 0, err
    assert "note: no file m.py exists here, so --issue was taken as the issue text 'm.py' itself." in err
    assert json.loads((tmp_path / OUT / "task.json").read_text())["issue"] == "m.py"
