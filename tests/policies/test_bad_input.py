"""Bad policy input gets one clear sentence (NexusError), never a traceback from deep inside."""

from __future__ import annotations

import pytest

from nexus.errors import NexusError
from nexus.runtime import REGISTRY, InferenceStream, make_policy
from tests.policies.conftest import VOCAB, geometry_model


def test_unknown_policy_lists_the_registry():
    with pytest.raises(NexusError) as exc:
        make_policy("h3o")
    for name in REGISTRY:
        assert name in str(exc.value)


@pytest.mark.parametrize("name, params, words", [
    ("nexus", {"lam": -0.1}, "lambda"),
    ("nexus", {"n": 0}, "n must be"),
    ("nexus", {"n": "sometimes"}, "n must be"),
    ("nexus", {"b": 24}, "power of two"),
    ("nexus", {"H": -1}, "walk_steps"),
    ("nexus", {"tau": 0}, "decode_period"),
    ("snapkv", {"kernel": 4}, "odd"),
    ("snapkv", {"pooling": "median"}, "pooling"),
    ("ada_snapkv", {"alpha": 1.5}, "alpha"),
    ("pyramidkv", {"beta": 0.5}, "beta"),
    ("h2o", {"recent_ratio": 1.0}, "recent_ratio"),
    ("morphkv", {"fusion": "mean"}, "fusion"),
    ("nexus_ht", {"top_fraction": 1.0}, "top_fraction"),
    ("nexus_ht", {"recent": 4}, "window"),
    ("tova", {"recent": 0}, "recent"),
    ("random", {"mode": "decode"}, "mode"),
    ("random", {"colour": "red"}, "has no parameter 'colour'; its parameters: decode_period \\(int\\)"),
])
def test_out_of_range_parameters(name, params, words):
    with pytest.raises(NexusError, match=words):
        make_policy(name, **params)


def test_paper_symbols_are_accepted():
    policy = make_policy("nexus", b=16, W=8, H=0, lam=0.0, n="det", tau=4)
    k = policy.knobs
    assert (k.block_size, k.window, k.walk_steps, k.n, policy.decode_period) == (16, 8, 0, "det", 4)


@pytest.mark.parametrize("name", ["nexus", "snapkv", "pyramidkv", "random"])
def test_budget_below_the_forced_set(tokenizer, name):
    model = geometry_model("mha", VOCAB, layers=2)
    with pytest.raises(NexusError, match="[Bb]udget"):
        InferenceStream(model, tokenizer, make_policy(name), budget=40, chunk_size=16)


@pytest.mark.parametrize("params, words", [
    ({"b": "notanint"}, "parameter block_size must be int, got 'notanint'"),
    ({"foo": "bar"}, "has no parameter 'foo'"),
    ({"lam": "high"}, "parameter lam must be float"),
])
def test_a_mistyped_parameter_names_the_valid_ones_and_their_types(params, words):
    """Issue 14: `-p b=notanint` said "'<' not supported ..." and `-p foo=bar` printed a constructor signature."""
    with pytest.raises(NexusError, match=words) as exc:
        make_policy("nexus", **params)
    assert "lam (float)" in str(exc.value) and "n (int | str)" in str(exc.value) and "\n" not in str(exc.value)
