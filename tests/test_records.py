"""The pipeline's contract (numlearn.records): every committed result still reads, older files are
upgraded in one place, a bad or future file is a clear error, and a write is atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from numlearn import records
from numlearn.records import SCHEMA, BadRecord, ResultRecord, RunRecord, is_result_file, result_path

STORE = Path(__file__).resolve().parents[1] / "results" / "runs"


def _result(**over) -> dict:
    d = {"benchmark": {"name": "synthetic_test", "kind": "numeric"}, "mode": "cot",
         "metrics": {"accuracy": 0.5, "n": 2}, "correct_by_id": {"a": 1, "b": 0},
         "run": {"loss": "del", "alpha": 1.28, "seed": 3, "run_dir": None}, "config": {"eval": {"limit": None}},
         "git": {"commit": "abc"}, "sampling": {"temperature": 0.0}}
    d.update(over)
    return d


def test_every_committed_result_reads_and_keeps_what_it_says():
    files = sorted(STORE.rglob("result*.json"))
    assert len(files) > 300, "the committed store should hold the Table 1 and ablation results"
    for f in files:
        assert is_result_file(f), f
        raw = json.loads(f.read_text())
        r = ResultRecord.read(f)
        out = r.to_dict()
        assert out["schema"] == SCHEMA
        # nothing lost or altered: only the version and the fields schema 1 left implicit are added
        for k, v in raw.items():
            if k != "run":
                assert out[k] == v, (f, k)
        assert {k: v for k, v in out["run"].items() if k in raw.get("run", {})} == raw.get("run", {})
        assert r.row == (raw["run"].get("loss_tag") or raw["run"].get("loss"))


def test_schema_1_is_upgraded_in_one_place(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "complete", "heldout": {"digit_entropy": 0.25}}))
    raw = _result(run={"loss": "ntl", "alpha": 0.3, "seed": 0, "run_dir": str(run_dir)})
    f = result_path(tmp_path / "eval", "synthetic_test", "cot")
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(raw))  # no "schema", no "protocol", no run.heldout: a schema-1 file
    r = ResultRecord.read(f)
    assert r.protocol == "strict" and r.schema == SCHEMA
    assert r.heldout == {"digit_entropy": 0.25}  # from the run's own run.json
    assert r.training_config == raw["config"]  # no recipe recorded: the evaluation's config stands in
    assert r.row == "ntl" and r.limit is None and r.git_commit == "abc"
    r.write()
    again = json.loads(f.read_text())
    assert again["schema"] == SCHEMA and again["protocol"] == "strict" and again["sampling"] == raw["sampling"]


@pytest.mark.parametrize("text, match", [
    ("{not json", "not a readable result file"),
    ("[1, 2]", "is a JSON object"),
    (json.dumps({"metrics": {}}), r"no 'accuracy' field"),
    (json.dumps({**_result(), "schema": SCHEMA + 1}), "upgrade numlearn"),
])
def test_a_bad_result_file_is_an_error_naming_it(tmp_path, text, match):
    f = tmp_path / "result.json"
    f.write_text(text)
    with pytest.raises(BadRecord, match=match) as e:
        ResultRecord.read(f)
    assert str(f) in str(e.value)


def test_run_record_status_and_model_lookup(tmp_path):
    (tmp_path / "final").mkdir()
    (tmp_path / "run.json").write_text(json.dumps({"status": "complete", "loss": "del", "loss_tag": "del_paper",
                                                   "alpha": 1.28, "seed": 1, "git": {"commit": "x"},
                                                   "heldout": {}, "n_params": 7}))
    rec = RunRecord.of_model(tmp_path / "final")
    assert rec.row == "del_paper" and rec.extra == {"n_params": 7}
    s = rec.summary()
    assert s["loss_tag"] == "del_paper" and s["train_git"] == {"commit": "x"} and "n_params" not in s
    assert RunRecord.of_model(tmp_path) is None  # not a run's final/: a hub name or another directory
    (tmp_path / "run.json").write_text(json.dumps({"status": "half-done"}))
    with pytest.raises(BadRecord, match="status 'half-done'"):
        RunRecord.of_run_dir(tmp_path)
    no_tag = RunRecord(status="running", loss="mle")
    assert "loss_tag" not in no_tag.to_dict() and no_tag.to_dict()["alpha"] is None


def test_for_protocol_finds_the_rescored_sibling(tmp_path):
    f = result_path(tmp_path, "b", "pot")
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(_result(protocol="strict")))
    r = ResultRecord.read(f)
    assert r.for_protocol(None) is r and r.for_protocol("strict") is r
    assert r.for_protocol("official") is None
    result_path(tmp_path, "b", "pot", "official").write_text(json.dumps(_result(protocol="official")))
    assert r.for_protocol("official").protocol == "official"


def test_write_is_atomic(tmp_path, monkeypatch):
    f = tmp_path / "result.json"
    ResultRecord.from_dict(_result()).write(f)
    before = f.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(records.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        ResultRecord.from_dict(_result(mode="pot")).write(f)
    assert f.read_text() == before  # the reader still sees the whole old file, never half a new one
    monkeypatch.setattr(records.os, "replace", os.replace)
    assert ResultRecord.read(f).mode == "cot"
