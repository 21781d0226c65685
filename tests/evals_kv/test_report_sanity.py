"""The report's 'random is worst beyond noise' verdict rests on paired (same-item) differences, not on whether two
marginal intervals overlap: items differ far more than policies, so marginal intervals overlap even when a policy
beats random on every single item."""

from __future__ import annotations

from nexus.evals.kv.report import sanity


def _summary(cells: dict) -> dict:
    return {"headline": "kl", "metrics": [{"key": "kl", "better": "lower"}], "policies": list(cells["20%"]),
            "cells": cells}


def _cell(values: list[float]) -> dict:
    from nexus.evals.kv.metrics import bootstrap_mean
    return {"items": len(values), "metrics": {"kl": bootstrap_mean(values).as_dict()}}


def _records(policy: str, values: list[float]) -> list[dict]:
    return [{"policy": policy, "budget": "20%", "item": f"i{k}", "metrics": {"kl": v}} for k, v in enumerate(values)]


def test_policy_better_on_every_item_is_beyond_noise_although_marginal_intervals_overlap():
    random_kl = [0.10, 0.40, 0.70]           # items vary a lot...
    better_kl = [v - 0.05 for v in random_kl]  # ...the policy is 0.05 better on each one
    noisy_kl = [0.05, 0.45, 0.60]            # better on average, but not on every item
    cells = {"20%": {"random": _cell(random_kl), "good": _cell(better_kl), "noisy": _cell(noisy_kl)}}
    records = _records("random", random_kl) + _records("good", better_kl) + _records("noisy", noisy_kl)
    out = sanity(_summary(cells), records)
    verdict = out["random_worst"]["20%"]
    assert verdict["worst"] and verdict["not_worse_than"] == []
    assert verdict["beyond_noise_vs"] == ["good"]
    assert out["paired_vs_random"]["20%"]["good"]["ci95"][1] < 0


def test_policy_worse_than_random_is_named():
    random_kl, worse_kl = [0.1, 0.2, 0.3], [0.2, 0.3, 0.4]
    cells = {"20%": {"random": _cell(random_kl), "bad": _cell(worse_kl)}}
    out = sanity(_summary(cells), _records("random", random_kl) + _records("bad", worse_kl))
    assert out["random_worst"]["20%"] == {"worst": False, "not_worse_than": ["bad"], "beyond_noise_vs": []}
