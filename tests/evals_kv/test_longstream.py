"""The long-stream suite plants what it says, and on the embedded model it tells dense from random eviction."""

from __future__ import annotations

import json

import pytest
import torch

from nexus.evals.kv.cli import run_suites
from nexus.evals.kv.config import RunConfig, parse_budgets, size_for
from nexus.evals.kv.corpus import SOURCE_PACKAGES, corpus, split_packages
from nexus.evals.kv.longstream import BRIDGE, EARLY, MENTION, LongStreamSuite


@pytest.fixture(scope="module")
def items(tokenizer):
    return LongStreamSuite().build_items(size_for("longstream", "ci"), tokenizer, seed=0)


def test_planted_spans_decode_to_the_planted_lines(items, tokenizer):
    assert len(items) == 3
    for item in items:
        ids = item.data["haystack"]
        assert 900 <= len(ids) <= 1150 and item.context_tokens == len(ids)
        roles = {p["role"]: p for p in item.data["planted"]}
        assert set(roles) == {"single", "twohop_key", "twohop_bridge", "reref", "reref_mention"}
        for p in item.data["planted"]:
            lo, hi = p["span"]
            assert tokenizer.decode(ids[lo:hi]) == p["text"]
        depth = {r: p["span"][0] / len(ids) for r, p in roles.items()}
        for role in ("single", "twohop_key", "reref"):  # planted early (zones are by characters: some slack)
            assert EARLY[0] - 0.03 <= depth[role] <= EARLY[1] + 0.05, (role, depth)
        assert BRIDGE[0] - 0.05 <= depth["twohop_bridge"] <= BRIDGE[1] + 0.05
        assert MENTION[0] - 0.05 <= depth["reref_mention"] <= MENTION[1] + 0.05
        assert roles["twohop_bridge"]["span"][0] > roles["twohop_key"]["span"][1]  # the bridge comes later
        filename = roles["twohop_key"]["text"].split("in file ")[1].rstrip(".")
        twohop, reref = (q for q in item.data["questions"] if q["kind"] in ("twohop", "reref"))
        assert filename in roles["twohop_bridge"]["text"] and filename not in tokenizer.decode(twohop["question"])
        key = roles["reref"]["text"].split("for ")[1].split(" is")[0]
        assert key in roles["reref_mention"]["text"] and reref["answer"] not in roles["reref_mention"]["text"]
        for q in item.data["questions"]:
            assert len(q["answer"]) == 6 and q["answer"].isdigit() and q["answer"] not in tokenizer.decode(q["question"])
        answers = [q["answer"] for q in item.data["questions"]]
        assert len(set(answers)) == 3


def test_dev_and_test_splits_are_disjoint():
    assert set(split_packages("dev")).isdisjoint(split_packages("test"))
    assert set(split_packages("dev")) | set(split_packages("test")) == set(SOURCE_PACKAGES)
    dev = {d.name.split(":")[1] for d in corpus(0, "dev")}
    test = {d.name.split(":")[1] for d in corpus(0, "test")}
    assert dev <= set(split_packages("dev")) and test <= set(split_packages("test"))
    base = dict(suite="longstream", policies=["dense"], budgets=parse_budgets("20%"), size=size_for("longstream", "ci"))
    prints = {s: RunConfig(**base, split=s).fingerprint() for s in ("all", "dev", "test")}
    assert len(set(prints.values())) == 3
    assert "split" not in json.dumps(RunConfig(**base).fingerprint())  # "all" keeps earlier runs' fingerprints


@pytest.mark.slow
def test_longstream_dense_beats_random_and_survival_is_measured(tmp_path, embedded):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a shared 2-core box one thread is several times faster than two
    try:
        out = run_suites(["longstream"], policies="random,snapkv", budgets="20%", size="ci", out=tmp_path,
                         model_pair=embedded, command="test")["longstream"]
    finally:
        torch.set_num_threads(threads)
    cells, sanity = out["cells"]["20%"], out["sanity"]
    assert all(cells[n]["items"] == 3 for n in ("dense", "random", "snapkv"))
    dense = cells["dense"]["metrics"]
    # the 135M model must retrieve the facts when nothing is evicted, or the gap would measure noise
    assert dense["em_dense"]["mean"] >= 0.5 and dense["logprob_dense"]["mean"] > -4, dense
    assert dense["logprob_gap"] == {"mean": 0.0, "ci95": [0.0, 0.0], "n": 9}
    assert "dense" in sanity["random_worst"]["20%"]["beyond_noise_vs"], sanity["paired_vs_random"]
    assert sanity["paired_vs_random"]["20%"]["dense"]["ci95"][0] > 1.0  # nats: far beyond rounding
    assert sanity["dense_min_survival"] == 1.0
    records = json.loads((tmp_path / "longstream" / "records.json").read_text())
    for r in records:
        curves = r["detail"]["survival_curves"]
        assert set(curves) == {"single", "twohop_key", "twohop_bridge", "reref"}
        values = [v for c in curves.values() for v in c] + r["metrics"]["survival"] + r["metrics"]["survival_qfirst"]
        assert values and all(0.0 <= v <= 1.0 for v in values)
        if r["policy"] == "dense":
            assert set(values) == {1.0}
        else:
            assert min(r["metrics"]["survival"]) < 1.0  # 20% of the stream: something was evicted
    curves = out["survival_curves"]["20%"]
    assert set(curves) == {"dense", "random", "snapkv"} and set(curves["dense"]["mean"]) == {1.0}
    assert (tmp_path / "longstream" / "survival_vs_events.png").stat().st_size > 0
    assert "survival" in (tmp_path / "longstream" / "table.md").read_text()
