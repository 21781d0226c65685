"""Instances and predictions: the official fields and the forms other tools write; bad rows are reported by id
and field while the good rows still load."""

from __future__ import annotations

import json

import pytest

from nexus.errors import NexusError
from nexus.evals.swebench.instances import load_instances
from nexus.evals.swebench.predictions import load_predictions, resolve_predictions, write_predictions


def row(iid: str, **kw):
    base = {
        "instance_id": iid, "repo": "owner/name", "base_commit": "a" * 40, "problem_statement": "it breaks",
        "hints_text": "", "patch": "diff --git a/x b/x\n", "test_patch": "", "FAIL_TO_PASS": json.dumps(["t::a"]),
        "PASS_TO_PASS": json.dumps(["t::b", "t::c"]), "version": "1.0", "environment_setup_commit": "a" * 40,
        "created_at": "2024-01-01T00:00:00Z",
    }
    base.update(kw)
    return base


def test_jsonl_with_bad_rows_reports_id_and_field_and_keeps_the_rest(tmp_path):
    p = tmp_path / "i.jsonl"
    rows = [row("ok-1"), row("bad-sha", base_commit="not a sha"), row("bad-f2p", FAIL_TO_PASS="[oops"),
            row("ok-2", image="img:1", log_parser="parse_log_pytest", eval_type="pass_and_fail",
                test_cmd="pytest -rA"),
            row("bad-eval", eval_type="sometimes"), row("ok-1")]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    res = load_instances(p)
    assert [i.instance_id for i in res.instances] == ["ok-1", "ok-2"]
    got = {(pr.instance_id, pr.field) for pr in res.problems}
    assert got == {("bad-sha", "base_commit"), ("bad-f2p", "FAIL_TO_PASS"), ("bad-eval", "eval_type"),
                   ("ok-1", "instance_id"), ("row 7", "-")}
    ok2 = res.by_id()["ok-2"]
    assert ok2.FAIL_TO_PASS == ["t::a"] and ok2.PASS_TO_PASS == ["t::b", "t::c"]
    assert ok2.image == "img:1" and ok2.test_cmd == "pytest -rA"
    # to_row writes the official encoding back
    assert json.loads(ok2.to_row()["PASS_TO_PASS"]) == ["t::b", "t::c"]


def test_json_list_dict_and_parquet_load_the_same(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row("a-1"), row("b-2", FAIL_TO_PASS=["x::y"])]  # a plain list is accepted too
    (tmp_path / "l.json").write_text(json.dumps(rows))
    (tmp_path / "d.json").write_text(json.dumps({r["instance_id"]: r for r in rows}))
    flat = [dict(r, FAIL_TO_PASS=json.dumps(r["FAIL_TO_PASS"]) if isinstance(r["FAIL_TO_PASS"], list)
                 else r["FAIL_TO_PASS"]) for r in rows]
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "p.parquet")
    loaded = [load_instances(tmp_path / n).instances for n in ("l.json", "d.json", "p.parquet")]
    assert loaded[0] == loaded[1] == loaded[2]
    assert loaded[0][1].FAIL_TO_PASS == ["x::y"]


def test_missing_fields_and_ids_filter(tmp_path):
    p = tmp_path / "i.jsonl"
    r = row("no-patch")
    del r["patch"]
    p.write_text(json.dumps(r) + "\n" + json.dumps(row("keep")) + "\n" + json.dumps(row("drop")) + "\n")
    res = load_instances(p, ids=["keep", "ghost"])
    assert [i.instance_id for i in res.instances] == ["keep"]
    assert {(x.instance_id, x.field) for x in res.problems} == {("no-patch", "patch"), ("ghost", "instance_id")}


def test_unreadable_instance_files_are_one_clear_error(tmp_path):
    with pytest.raises(NexusError, match="does not exist"):
        load_instances(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(NexusError, match="must be .json, .jsonl or .parquet"):
        load_instances(tmp_path / "x.csv")


def test_predictions_jsonl_and_json_forms(tmp_path):
    preds = [{"instance_id": "a", "model_name_or_path": "m", "model_patch": "PA"},
             {"instance_id": "b", "model_name_or_path": "m", "model_patch": None}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(x) + "\n" for x in preds))
    (tmp_path / "l.json").write_text(json.dumps(preds))
    (tmp_path / "d.json").write_text(json.dumps({"a": {"model_patch": "PA", "model_name_or_path": "m"},
                                                 "b": {"model_patch": None, "model_name_or_path": "m"}}))
    forms = [load_predictions(tmp_path / n) for n in ("p.jsonl", "l.json", "d.json")]
    assert forms[0] == forms[1] == forms[2]
    assert forms[0]["a"].model_patch == "PA" and forms[0]["b"].model_patch is None
    # bare patch strings keyed by id (as some tools write) take the file name as the model name
    (tmp_path / "bare.json").write_text(json.dumps({"a": "PA"}))
    assert load_predictions(tmp_path / "bare.json")["a"].model_name_or_path == "bare"
    write_predictions(tmp_path / "out.jsonl", forms[0].values())
    assert load_predictions(tmp_path / "out.jsonl") == forms[0]


def test_bad_predictions_file_names_the_line(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"instance_id": "a", "model_patch": "x"}) + "\n{broken\n")
    with pytest.raises(NexusError, match="line 2 is not JSON"):
        load_predictions(p)
    p.write_text(json.dumps({"model_patch": "x"}) + "\n")
    with pytest.raises(NexusError, match="has no instance_id"):
        load_predictions(p)


def test_gold_and_empty_predictions(tmp_path):
    p = tmp_path / "i.jsonl"
    p.write_text(json.dumps(row("a", patch="GOLD")) + "\n")
    insts = load_instances(p).instances
    assert resolve_predictions("gold", insts)["a"].model_patch == "GOLD"
    assert resolve_predictions("empty", insts)["a"].model_patch == ""
