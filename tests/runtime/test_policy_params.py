"""`-p KEY=VALUE` policy parameters from the command line: numbers, words and booleans reach the policy typed."""
from __future__ import annotations

import pytest

from nexus.errors import NexusError
from nexus.runtime import make_policy
from nexus.runtime.cli import parse_params


def test_values_are_typed() -> None:
    params = parse_params(["n=det", "lam=0.25", "block_size=32", "shared_draws=true", "x=False"])
    assert params == {"n": "det", "lam": 0.25, "block_size": 32, "shared_draws": True, "x": False}
    params = parse_params(["unit=line", "key_span=1", "temper=0", "shared_draws=TRUE"])
    policy = make_policy("nexus_reservoir", **params)
    assert policy.knobs.shared_draws is True and policy.knobs.temper == 0


def test_a_value_without_key_is_one_sentence() -> None:
    with pytest.raises(NexusError, match="is not KEY=VALUE"):
        parse_params(["shared_draws"])
