"""Budget/policy parsing and the interval arithmetic the tables rely on."""

from __future__ import annotations

import pytest

from nexus.errors import NexusError
from nexus.evals.kv.config import Budget, parse_budgets, parse_policies, size_for
from nexus.evals.kv.metrics import beyond_noise, bootstrap_mean
from nexus.runtime import REGISTRY


def test_budgets_parse_densities_and_tokens():
    got = parse_budgets("10%, 0.2,512")
    assert got == [Budget(density=0.1), Budget(density=0.2), Budget(tokens=512)]
    assert got[0].resolve(2048) == 205 and got[2].resolve(2048) == 512
    assert [b.label for b in got] == ["10%", "20%", "512tok"]


@pytest.mark.parametrize("bad", ["0%", "150%", "abc", "", "-3", "1.5"])
def test_bad_budget_is_one_clear_error(bad):
    with pytest.raises(NexusError, match="density|budgets"):
        parse_budgets(bad)


def test_policies_all_and_dense_always_first():
    assert parse_policies("all", REGISTRY) == list(REGISTRY)
    assert parse_policies("streaming_llm", REGISTRY) == ["dense", "streaming_llm"]
    with pytest.raises(NexusError, match="registered policies"):
        parse_policies("dense,nosuch", REGISTRY)


def test_size_overrides_are_checked():
    assert size_for("fidelity", "ci", items=7).items == 7
    with pytest.raises(NexusError, match="--items"):
        size_for("fidelity", "ci", items=0)
    with pytest.raises(NexusError, match="Unknown size"):
        size_for("fidelity", "huge")


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    values = [0.1, 0.4, 0.35, 0.2, 0.9, 0.05, 0.3]
    a, b = bootstrap_mean(values, seed=3), bootstrap_mean(values, seed=3)
    assert a == b
    assert a.low <= a.mean <= a.high and a.high - a.low > 0
    assert bootstrap_mean([0.0, 0.0, 0.0]).as_dict() == {"mean": 0.0, "ci95": [0.0, 0.0], "n": 3}
    assert bootstrap_mean([]).n == 0


def test_beyond_noise_needs_separated_intervals():
    low = bootstrap_mean([0.0, 0.01, 0.02, 0.01])
    high = bootstrap_mean([1.0, 1.2, 0.9, 1.1])
    mixed = bootstrap_mean([0.0, 0.0, 0.01, 0.4])
    assert beyond_noise(low, high) and beyond_noise(high, low)
    assert not beyond_noise(low, mixed)


@pytest.mark.parametrize("argv, needle", [(["--suite", "nope"], "Unknown suite"),
                                          (["--budgets", "200%"], "neither a density"),
                                          (["--policies", "dense,nope"], "registered policies")])
def test_bad_cli_input_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys, argv, needle):
    from nexus.cli import main

    monkeypatch.setattr("sys.argv", ["nexus", "eval", "kv", "--out", str(tmp_path), *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
