"""The retrieval suite can discriminate: dense retrieves most needles of the CI items, and EM is computed right.

The CI items (size "ci": 4 haystacks of 1024 tokens, seed 0, 16 questions) are fixed, so the dense score is a
property of the item format and the embedded model, not of chance (docs/results.md has the measured numbers).
"""

from __future__ import annotations

import torch
import pytest

from nexus.evals.kv.config import RunConfig, parse_budgets, size_for
from nexus.evals.kv.retrieval import TASKS, RetrievalSuite
from nexus.evals.kv.suite import Item


def test_compare_scores_exact_match_per_question():
    """EM is 1 exactly where the extracted answer equals the planted value; dense's own EM rides along."""
    answers = ["123456", "234567", "345678", "456789"]
    item = Item(id="x", context_tokens=10, data={"questions": [
        {"task": t, "answer": a, "answer_ids": [1, 2]} for t, a in zip(TASKS, answers)]})
    lp = torch.log_softmax(torch.zeros(2, 4), -1)
    ref = [{"logprobs": lp, "answer": a} for a in answers[:3] + ["9"]]
    got = [{"logprobs": lp, "answer": a} for a in [answers[0], "0", answers[2], answers[3]]]
    m = RetrievalSuite().compare(item, 5, ref, got)
    assert m["em"] == [1.0, 0.0, 1.0, 1.0] and m["em_dense"] == [1.0, 1.0, 1.0, 0.0]
    assert m["same_answer"] == [1.0, 0.0, 1.0, 0.0] and m["logprob_gap"] == [0.0] * 4


@pytest.mark.slow
def test_dense_retrieves_most_ci_needles_and_the_summary_agrees(tmp_path, embedded):
    from nexus.evals.kv.report import summarize_suite
    from nexus.evals.kv.runner import run_quality

    size = size_for("retrieval", "ci")
    cfg = RunConfig(suite="retrieval", policies=["dense"], budgets=parse_budgets("20%"), size=size)
    store = run_quality(RetrievalSuite(), cfg, *embedded, tmp_path)
    records = [r for r in store.records.values() if r["policy"] == "dense"]
    per_question = [e for r in records for e in r["metrics"]["em"]]
    assert len(records) == 4 and len(per_question) == 16
    assert per_question == [e for r in records for e in r["metrics"]["em_dense"]]  # dense judged as itself
    summary = summarize_suite(tmp_path, "retrieval")
    em = summary["cells"]["20%"]["dense"]["metrics"]["em"]
    assert em["n"] == 16 and em["mean"] == pytest.approx(sum(per_question) / 16)
    assert em["mean"] >= 0.6, per_question
