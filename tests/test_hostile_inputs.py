"""Careless inputs that used to make an evaluation never finish, or score silently wrong (issue 29):
each gets the right result or one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numlearn.evaluation import extract_answer
from numlearn.evaluation.benchmarks import check_limit
from numlearn.evaluation.metrics import compute_metrics
from numlearn.evaluation.runner import GenerationsLock, evaluate_problems, read_jsonl
from test_evaluation import SAMPLING, ScriptedBackend, _problems

REPO = Path(__file__).resolve().parents[1]
BIG = "7" * 5000  # past Python's 4,300-digit int-to-str limit


@pytest.mark.parametrize("protocol", ["strict", "official"])
def test_a_5000_digit_answer_is_scored(tmp_path, protocol):
    assert extract_answer("svamp", "The answer is " + BIG, protocol=protocol) in (BIG, "inf")  # official: float()
    m = compute_metrics([{"id": "0", "gt": "5", "pred": BIG, "correct": False, "mode": "cot",
                          "protocol": protocol}], "number")
    assert 11_000 < m["numerical_distance"] < 12_000  # ln(7.7e4999) - ln(5), finite
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(lambda p: f"print({BIG[:4000]} * 10 ** 1000 + 777)" if "program" in p else "The answer is " + BIG)
    evaluate_problems(_problems(2), be, "svamp", "paper", SAMPLING, out, protocol=protocol)
    recs, bad = read_jsonl(out)
    assert len(recs) == 2 and bad == 0


def test_line_separators_in_a_completion_keep_one_line_per_problem(tmp_path):
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(lambda p: "The answer is 5.\u2028 next\u2029 and\x85 more\x1c")
    evaluate_problems(_problems(3), be, "svamp", "cot", SAMPLING, out)
    recs, bad = read_jsonl(out)
    assert len(recs) == 3 and bad == 0
    again = evaluate_problems(_problems(3), be, "svamp", "cot", SAMPLING, out)
    assert again["n_resumed"] == 3 and again["n_generated"] == 0  # no "holds n-1 ... re-run" loop


def test_a_second_evaluation_of_the_same_file_stops_with_one_line(tmp_path):
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(lambda p: "The answer is 5.")
    with GenerationsLock(out):
        with pytest.raises(RuntimeError, match="being written by another evaluation .pid \\d+"):
            evaluate_problems(_problems(2), be, "svamp", "cot", SAMPLING, out)
    assert be.calls == 0
    evaluate_problems(_problems(2), be, "svamp", "cot", SAMPLING, out)  # the lock is released


def test_duplicate_lines_are_repaired_not_fatal(tmp_path):
    """What two unlocked evaluations left behind (every line twice): one line per problem is kept,
    the file rewritten, nothing regenerated."""
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(lambda p: "The answer is 5.")
    evaluate_problems(_problems(3), be, "svamp", "cot", SAMPLING, out)
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines + lines) + "\n")
    recs, bad = read_jsonl(out)
    assert [r["id"] for r in recs] == ["0", "1", "2"] and bad == 3
    calls = be.calls
    info = evaluate_problems(_problems(3), be, "svamp", "cot", SAMPLING, out)
    assert info["n_resumed"] == 3 and be.calls == calls and len(out.read_text().splitlines()) == 3


@pytest.mark.parametrize("limit", [-1, 0, 1.5, True, "3"])
def test_eval_limit_must_be_positive(limit):
    with pytest.raises(ValueError, match="eval.limit"):
        check_limit(limit)
    assert check_limit(None) is None and check_limit(3) == 3


def test_a_zero_program_timeout_is_refused(tmp_path):
    with pytest.raises(ValueError, match="time out every program"):
        evaluate_problems(_problems(1), ScriptedBackend(lambda p: "x"), "svamp", "pot", SAMPLING,
                          tmp_path / "g.jsonl", pot_timeout_s=0)


@pytest.mark.parametrize("override,message", [("eval.limit=-1", "eval.limit=-1"), ("eval.limit=0", "eval.limit=0"),
                                              ("eval.pot_timeout_s=0", "eval.pot_timeout_s=0: must be a finite number > 0")])
def test_bad_eval_options_are_one_line(override, message, cli, tmp_path):
    r = cli("numlearn.evaluate", [override], env={"NUMLEARN_OUTPUT_DIR": str(tmp_path)})
    lines = r.lines
    assert r.returncode != 0 and len(lines) == 1 and message in lines[0], r.stderr


def test_generations_round_trip_every_code_point_class(tmp_path):
    """json.dumps(ensure_ascii=False) keeps these raw; the reader must not split on them."""
    p = tmp_path / "g.jsonl"
    rows = [{"id": str(i), "text": t} for i, t in enumerate(["a\u2028b", "c\u2029d", "e\x85f", "g\x1dh", "i\rj"])]
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert read_jsonl(p) == (rows, 0)


@pytest.mark.parametrize("code,out", [("import numpy as np\nprint(int(np.arange(4).sum()))", "6"),
                                      ("import pandas as pd\nprint(pd.Series([1, 2]).sum())", "3")])
def test_numpy_and_pandas_programs_run_under_strict(code, out):
    """Their imports call os.putenv, which the audit hook refused, so every such program scored wrong;
    a changed environment is the program's own (it cannot start processes), so the hook allows it."""
    from numlearn.evaluation.sandbox import isolation_status, run_program

    if not isolation_status()[0]:
        pytest.skip("no OS sandbox here")
    r = run_program(code, timeout_s=20)
    assert r.ok and r.stdout.strip() == out, r.error


def test_truncated_weights_are_not_a_complete_run(tmp_path, cli):
    import torch
    from safetensors.torch import save_file

    from numlearn.rundirs import damaged_weights, run_is_complete

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    (run / "run.json").write_text(json.dumps({"status": "complete"}))
    w = run / "final" / "model.safetensors"
    save_file({"a": torch.ones(64, 64), "b": torch.zeros(8)}, str(w))
    assert damaged_weights(run / "final") == [] and run_is_complete(run)
    data = w.read_bytes()
    w.write_bytes(data[: len(data) - 100])  # a copy cut short
    (bad,) = damaged_weights(run / "final")
    assert bad.startswith("model.safetensors") and not run_is_complete(run)
    w.write_bytes(b"\xff" * 16)  # not a safetensors file at all
    assert damaged_weights(run / "final") and not run_is_complete(run)
    r = cli("numlearn.evaluate", [f"model_path={run / 'final'}", "eval.limit=1"],
            env={"NUMLEARN_OUTPUT_DIR": str(tmp_path / "out")})
    assert r.returncode != 0 and len(r.lines) == 1 and "damaged weights" in r.lines[0], r.stderr


def test_conflicting_results_of_one_run_are_an_error_not_first_wins(tmp_path):
    from numlearn.reporting.collect import load_results

    def write(d, correct):
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({
            "run": {"experiment": "t", "model": "tiny", "loss": "del", "alpha": 1.0, "seed": 0},
            "benchmark": {"name": "b", "kind": "number"}, "mode": "cot",
            "metrics": {"accuracy": sum(correct) / len(correct), "n": len(correct)},
            "correct_by_id": {str(i): c for i, c in enumerate(correct)}}))

    write(tmp_path / "a" / "eval" / "b" / "cot", [1, 0, 1, 1])
    write(tmp_path / "copy" / "eval" / "b" / "cot", [1, 0, 1, 1])  # a copied run dir: the same result
    df = load_results([tmp_path, tmp_path / "a"])  # overlapping paths too
    assert len(df) == 1
    write(tmp_path / "z" / "eval" / "b" / "cot", [0, 0, 0, 1])  # the same seed, another result
    with pytest.raises(ValueError, match="two different results for .*seed.: .0."):
        load_results([tmp_path])


def test_a_copied_run_dir_keeps_its_fingerprint_and_a_retrained_one_does_not(tmp_path):
    import shutil
    import time

    from numlearn.provenance import model_fingerprint

    m = tmp_path / "run" / "final"
    m.mkdir(parents=True)
    (m / "config.json").write_text("{}")
    (m / "model.safetensors").write_bytes(bytes(range(256)) * 100)
    time.sleep(0.01)
    shutil.copytree(tmp_path / "run", tmp_path / "elsewhere" / "run")  # new path, new mtimes
    assert model_fingerprint(str(m)) == model_fingerprint(str(tmp_path / "elsewhere" / "run" / "final"))
    (m / "model.safetensors").write_bytes(bytes(range(255, -1, -1)) * 100)  # retrained: same size, new bytes
    assert model_fingerprint(str(m)) != model_fingerprint(str(tmp_path / "elsewhere" / "run" / "final"))


@pytest.mark.parametrize("module,flag", [("numlearn.reporting.aggregate", "--out"),
                                      ("numlearn.reporting.robustness", "--out"),
                                      ("numlearn.reporting.sweep", "--out"),
                                      ("numlearn.reporting.store", "--store")])
def test_an_output_dir_that_is_a_file_is_one_line(module, flag, tmp_path, cli):
    f = tmp_path / "afile"
    f.write_text("x")
    args = ["publish", str(tmp_path)] if module.endswith("store") else [str(tmp_path)]
    r = cli(module, [*args, flag, str(f / "sub")])
    lines = r.lines
    assert r.returncode == 2 and len(lines) == 1 and "is a file, not a directory" in lines[0], r.stderr


def test_a_full_disk_while_writing_tables_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    import pandas as pd

    from numlearn.reporting import aggregate

    for loss in ("mle", "del"):
        _result(tmp_path / "runs" / loss, loss)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "table1.csv")
    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    assert aggregate.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0]


def _result(d: Path, loss: str):
    d = d / "eval" / "b" / "cot"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({
        "run": {"experiment": "t", "model": "tiny", "loss": loss, "alpha": 1.0, "seed": 0},
        "benchmark": {"name": "b", "kind": "number"}, "mode": "cot",
        "metrics": {"accuracy": 0.5, "n": 2}, "correct_by_id": {"0": 1, "1": 0}}))


# ---------------------------------------------------------------- replayed generations (issue 41, item 7)
def _chained_evaluation(saved_tiny_model, tmp_path, monkeypatch):
    """A real ``run_evaluation`` (synthetic_test, PoT, 4 problems) whose backend writes a wrong program for
    every problem: accuracy 0, every line with a program run."""
    from hydra import compose, initialize_config_dir

    import numlearn.evaluation.recipe as ev  # the recipe calls its own backend_from_config

    monkeypatch.setattr(ev, "backend_from_config", lambda *a, **k: ScriptedBackend(
        lambda p: "x = 1\nprint(x)" if "program" in p else "The answer is 1."))
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("evaluate", overrides=[f"model_path={saved_tiny_model}", f"eval_dir={tmp_path}/eval",
                                             f"paths.cache_dir={tmp_path}/cache", "eval.modes=[pot]",
                                             "eval.benchmarks.synthetic_test.generator.n=4",
                                             "eval.benchmarks.synthetic_ood.generator.n=1"])
    files = ev.run_evaluation(cfg)
    return cfg, files[0], files[0].with_name("generations.jsonl")


def _forge(gens: Path, n: int = 2) -> None:
    """The reported attack: two lines given a fabricated program run that prints the right answer."""
    rows = [json.loads(x) for x in gens.read_text().splitlines()]
    for r in rows[:n]:
        att = r["attempts"][0]
        att["completion"] = f"print({r['gt_raw']})"
        for side in ("strict", "official"):
            att["program"][side] = {**att["program"][side], "output": f"{r['gt_raw']}\n", "ok": True, "error": None}
        r.update({"pred": str(r["gt_raw"]), "correct": True})
    gens.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return rows


def test_forged_lines_break_the_chain_for_check_and_resume(saved_tiny_model, tmp_path, monkeypatch, capsys):
    from numlearn.evaluation.score import main as score_main

    cfg, result, gens = _chained_evaluation(saved_tiny_model, tmp_path, monkeypatch)
    stored = json.loads(result.read_text())
    assert stored["metrics"]["accuracy"] == 0.0
    chain = stored["generation"]["chain"]
    assert chain["lines"] == 4 and chain["head"] == json.loads(gens.read_text().splitlines()[-1])["chain"]
    assert score_main([str(gens), "--check"]) == 0
    _forge(gens)
    capsys.readouterr()
    assert score_main([str(gens), "--check"]) == 1  # before: "matches result.json"
    assert "hash chain broken at line 1" in capsys.readouterr().err
    import numlearn.evaluation.recipe as ev

    with pytest.raises(RuntimeError, match=r"line 1 \(id [\w-]+\) breaks the generations' hash chain"):
        ev.run_evaluation(cfg)  # resume refuses, in one line; nothing rescored from the forged lines
    assert json.loads(result.read_text())["metrics"]["accuracy"] == 0.0


def test_a_forger_who_recomputes_the_chain_is_caught_by_rerunning_the_programs(saved_tiny_model, tmp_path,
                                                                              monkeypatch, capsys):
    """A keyless chain can be recomputed and the head in result.json replaced: the recorded program runs
    cannot be made to agree with what the programs print when run again."""
    from numlearn.evaluation.runner import chain_seed, line_digest
    from numlearn.evaluation.score import main as score_main

    _, result, gens = _chained_evaluation(saved_tiny_model, tmp_path, monkeypatch)
    assert score_main([str(gens), "--check", "--rerun-programs"]) == 0
    assert "4 recorded program run(s) re-executed: all outputs agree" in capsys.readouterr().err
    stored = json.loads(result.read_text())
    rows = _forge(gens)
    for r in rows:  # fabricated outputs, but the completion kept as generated: only re-running shows it
        r["attempts"][0]["completion"] = "x = 1\nprint(x)"
    head = chain_seed(stored["generation"]["chain"]["run_key"])
    for r in rows:
        r["chain"] = head = line_digest(head, r)
    gens.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    stored["generation"]["chain"]["head"] = head
    result.write_text(json.dumps(stored))
    capsys.readouterr()
    assert score_main([str(gens), "--check"]) == 1  # the metrics differ from the forged result's ...
    stored["metrics"]["accuracy"], stored["correct_by_id"] = 0.5, {r["id"]: r["correct"] for r in rows}
    from numlearn.evaluation.score import rescore_records

    stored["metrics"] = rescore_records([json.loads(x) for x in gens.read_text().splitlines()], stored,
                                        stored["protocol"])[0]["metrics"]
    result.write_text(json.dumps(stored))
    capsys.readouterr()
    assert score_main([str(gens), "--check"]) == 0  # ... until those are forged too: chain and metrics agree
    assert score_main([str(gens), "--check", "--rerun-programs"]) == 1
    err = capsys.readouterr().err
    assert "4 differ" in err, err  # the strict and official runs of both forged lines


def test_unchained_lines_of_an_earlier_numlearn_are_regenerated(tmp_path, capsys, caplog):
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(lambda p: "The answer is 0.")
    evaluate_problems(_problems(3), be, "svamp", "cot", SAMPLING, out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    out.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "chain"}) + "\n" for r in rows))
    calls = be.calls
    info = evaluate_problems(_problems(3), be, "svamp", "cot", SAMPLING, out)
    assert info["n_stale_lines"] == 3 and be.calls > calls and "before generations were hash-chained" in caplog.text
    assert info["chain"]["lines"] == 3
