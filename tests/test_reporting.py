"""The aggregator, from hand-written result files, checked cell by cell."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from numlearn.reporting.aggregate import Selection, aggregate, paired_bootstrap
from numlearn.reporting.collect import load_results


def _write(root: Path, loss, seed, bench, mode, correct: list[int], dist=None, alpha=0.01, model="tiny"):
    d = root / model / loss / f"alpha={alpha}" / f"seed={seed}" / "eval" / bench / mode
    d.mkdir(parents=True, exist_ok=True)
    n = len(correct)
    res = {
        "run": {"experiment": "t", "model": model, "loss": loss, "alpha": alpha, "seed": seed},
        "benchmark": {"name": bench, "kind": "number"}, "mode": mode,
        "metrics": {"accuracy": sum(correct) / n, "n": n, "numerical_distance": dist,
                    "digit_acc_int": {"0": sum(correct) / n}, "digit_acc_frac": {}},
        "correct_by_id": {str(i): c for i, c in enumerate(correct)},
    }
    (d / "result.json").write_text(json.dumps(res))


@pytest.fixture()
def results(tmp_path):
    r = tmp_path / "res"
    # MLE: seed 0 -> 2/4 and 1/4; seed 1 -> 3/4 and 1/4
    _write(r, "mle", 0, "bench_a", "cot", [1, 1, 0, 0], dist=0.5)
    _write(r, "mle", 0, "bench_b", "pot", [1, 0, 0, 0], dist=1.0)
    _write(r, "mle", 1, "bench_a", "cot", [1, 1, 1, 0], dist=0.25)
    _write(r, "mle", 1, "bench_b", "pot", [1, 0, 0, 0], dist=0.75)
    # DEL: seed 0 -> 4/4 and 2/4; seed 1 -> 3/4 and 2/4
    _write(r, "del", 0, "bench_a", "cot", [1, 1, 1, 1], dist=0.125)
    _write(r, "del", 0, "bench_b", "pot", [1, 1, 0, 0], dist=0.5)
    _write(r, "del", 1, "bench_a", "cot", [1, 1, 1, 0], dist=0.25)
    _write(r, "del", 1, "bench_b", "pot", [1, 1, 0, 0], dist=0.5)
    return r


def test_tables_cell_by_cell(results, tmp_path):
    out = tmp_path / "out"
    res = aggregate([results], out, command="pytest", reference=True, n_boot=200)
    mean, std = res["mean"], res["std"]
    assert list(mean.columns) == ["bench_a (cot)", "bench_b (pot)", "mACC"]
    assert list(mean.index) == [("tiny", "mle"), ("tiny", "del")]
    assert mean.loc[("tiny", "mle"), "bench_a (cot)"] == pytest.approx(62.5)
    assert mean.loc[("tiny", "mle"), "bench_b (pot)"] == pytest.approx(25.0)
    assert mean.loc[("tiny", "mle"), "mACC"] == pytest.approx((37.5 + 50.0) / 2)   # seed mACCs 37.5, 50
    assert std.loc[("tiny", "mle"), "bench_a (cot)"] == pytest.approx(np.std([50, 75], ddof=1))
    assert mean.loc[("tiny", "del"), "bench_a (cot)"] == pytest.approx(87.5)
    assert mean.loc[("tiny", "del"), "mACC"] == pytest.approx((75.0 + 62.5) / 2)
    md = (out / "table1.md").read_text()
    assert "| tiny | mle | 2 | 62.5 ± 17.7 | 25.0 ± 0.0 | 43.8 ± 8.8 |" in md
    assert "| tiny | del | 2 | 87.5 ± 17.7 | 50.0 ± 0.0 | 68.8 ± 8.8 |" in md
    ref = [ln for ln in md.splitlines() if ln.startswith("| *paper: Qwen2.5-1.5B* | *del* |")]
    assert len(ref) == 1 and ref[0].endswith("| *55.4* |")  # reference rows: labelled, separate,
    assert ref[0].count("*55.4*") == 1 and "87.5" not in ref[0]  # only the paper's own mACC
    assert "command: `pytest`" in md
    csv = pd.read_csv(out / "table1.csv", index_col=[0, 1])
    assert csv.loc[("tiny", "del"), "mACC acc"] == pytest.approx(68.75)
    assert csv.loc[("tiny", "mle"), "bench_a (cot) dist"] == pytest.approx(0.375)
    tex = (out / "table1.tex").read_text()
    assert "tiny & del & 87.5 $\\pm$ 17.7" in tex
    digits = pd.read_csv(out / "digits.csv")
    cell = digits.set_index(["model", "loss", "column"]).loc[("tiny", "mle", "bench_a (cot)"), "int[10^0]"]
    assert cell == pytest.approx((50.0 + 75.0) / 2)  # units-digit accuracy, mean over the two seeds


def test_paired_bootstrap(results):
    df = load_results([results])
    b = paired_bootstrap(df, n_boot=500, seed=0)
    row = b[(b["loss"] == "del") & (b["column"] == "bench_a (cot)")].iloc[0]
    # per-problem mean over seeds: del [1,1,1,.5], mle [1,1,.5,0] -> diffs [0,0,.5,.5], mean .25
    assert row["delta"] == pytest.approx(25.0)
    # problem-only (secondary): every per-problem difference is >= 0, so no resample goes below 0
    assert row["problem_ci_low"] <= 25.0 <= row["problem_ci_high"] and row["problem_ci_low"] >= 0.0
    # seed-aware (primary): both losses ran seeds 0 and 1 -> paired; two seeds are too few to call it
    assert row["n_seeds"] == 2 and row["n_seeds_baseline"] == 2 and row["paired_seeds"]
    assert row["ci_low"] <= 25.0 <= row["ci_high"] and not row["significant"]
    macc = b[(b["loss"] == "del") & (b["column"] == "mACC")].iloc[0]
    assert macc["delta"] == pytest.approx((25.0 + 25.0) / 2)


def test_no_results_is_a_clear_error(tmp_path):
    from numlearn.reporting.aggregate import main

    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def test_protocols_are_never_mixed_in_one_table(results, tmp_path):
    files = sorted(results.rglob("result.json"))
    r = json.loads(files[0].read_text())
    files[0].write_text(json.dumps({**r, "protocol": "official"}))
    with pytest.raises(ValueError, match="mix evaluation protocols"):
        load_results([results])
    with pytest.raises(FileNotFoundError, match="--protocol official --write"):
        load_results([results], protocol="official")
    for f in files[1:]:  # rescored siblings, as `numlearn.evaluation.score --write` leaves them
        rr = json.loads(f.read_text())
        f.with_name("result.official.json").write_text(json.dumps({**rr, "protocol": "official"}))
    df = load_results([results], protocol="official")
    assert set(df["protocol"]) == {"official"} and len(df) == len(files)
    files[0].with_name("result.strict.json").write_text(json.dumps(r))
    assert set(load_results([results], protocol="strict")["protocol"]) == {"strict"}


def test_runs_trained_under_different_recipes_never_share_a_table(results):
    """A preset changed between sittings (the model's depth, the step count): the table refuses,
    naming the difference; runs that differ only in loss and seed are one recipe."""
    recipe = {"model": {"name": "tiny", "config": {"num_hidden_layers": 2}}, "data": {"pot": 0.25},
              "train": {"max_steps": 1000, "logging_steps": 50}, "loss": {"name": "mle", "alpha": 0.0}, "seed": 0}
    files = sorted(results.rglob("result.json"))
    for i, f in enumerate(files):
        r = json.loads(f.read_text())
        rec = json.loads(json.dumps(recipe))
        rec["loss"]["name"], rec["seed"] = r["run"]["loss"], r["run"]["seed"]
        rec["train"]["logging_steps"] = 10 + i  # bookkeeping, not the recipe
        r["run"]["recipe"] = rec
        f.write_text(json.dumps(r))
    assert len(load_results([results])) == len(files)
    r = json.loads(files[-1].read_text())
    r["run"]["recipe"]["model"]["config"]["num_hidden_layers"] = 4
    files[-1].write_text(json.dumps(r))
    with pytest.raises(ValueError, match=r"mix training recipes: .* model\.config\.num_hidden_layers: 2 -> 4"):
        load_results([results])
    # a file from before run.json recorded its recipe is judged by the config it was evaluated with
    del r["run"]["recipe"]
    r["config"] = {**recipe, "train": {"max_steps": 1000}}
    files[-1].write_text(json.dumps(r))
    assert len(load_results([results])) == len(files)


def test_a_corrupt_result_file_is_named_and_can_be_skipped(results, tmp_path, capsys):
    from numlearn.reporting.aggregate import main

    bad = sorted(results.rglob("result.json"))[0]
    bad.write_text('{"metrics": ')
    assert main([str(results), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "--skip-bad" in err[0]
    assert main([str(results), "--out", str(tmp_path / "o"), "--skip-bad", "--no-reference"]) == 0
    assert f"skipped unreadable {bad}" in capsys.readouterr().err
    assert "1 unreadable result file(s) skipped" in (tmp_path / "o" / "table1.md").read_text()


def test_validation_chosen_rows_are_labelled_and_a_missing_one_is_an_error(results, tmp_path):
    """Two DEL rows (the official weight and the weight the sweep chose): only the chosen (loss, alpha) is
    labelled val-chosen, in every table; a chosen weight without result files is an error, not a silent gap."""
    for s, correct in enumerate([[1, 0, 0, 0], [0, 0, 0, 0]]):
        _write(results, "del", s, "bench_a", "cot", correct, dist=0.5, alpha=0.1)
        _write(results, "del", s, "bench_b", "pot", correct, dist=0.5, alpha=0.1)
    sel = tmp_path / "selected.json"
    sel.write_text(json.dumps({"del": {"alpha": 0.1, "accuracy": 61.0, "seeds": 3, "column": "v (cot)"}}))
    out = tmp_path / "out"
    res = aggregate([results], out, command="pytest", reference=False, n_boot=200, select=Selection(selected=sel))
    assert list(res["mean"].index) == [("tiny", "mle"), ("tiny", "del (alpha=0.01)"),
                                       ("tiny", "del (alpha=0.1, val-chosen)")]
    assert res["mean"].loc[("tiny", "del (alpha=0.1, val-chosen)"), "bench_a (cot)"] == pytest.approx(12.5)
    assert set(res["bootstrap"]["loss"]) == {"del (alpha=0.01)", "del (alpha=0.1, val-chosen)"}
    md = (out / "table1.md").read_text()
    assert "del alpha=0.1, best mean v (cot) accuracy 61.0 % over 3 seeds" in md
    sel.write_text(json.dumps({"del": {"alpha": 0.32}}))
    with pytest.raises(ValueError, match="del alpha=0.32 but no result file"):
        aggregate([results], out, reference=False, n_boot=50, select=Selection(selected=sel))
    sel.write_text(json.dumps({"del": 0.1}))
    with pytest.raises(ValueError, match="make sweep-report"):
        aggregate([results], out, reference=False, n_boot=50, select=Selection(selected=sel))


def test_a_table_regenerated_in_place_does_not_make_the_tree_dirty(tmp_path):
    """The aggregator rewrites tracked results/ files and the next tool (robustness) then reads the tree:
    its own output directory is the product, not a change to the code; anything else still is."""
    import shutil
    import subprocess

    from numlearn.provenance import git_info

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "results" / "t").mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "results" / "t" / "table.md").write_text("old\n")
    (repo / "src" / "code.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    assert git_info(repo / "src", products=repo / "results" / "t")["dirty"] is False
    (repo / "results" / "t" / "table.md").write_text("new\n")
    # results/ is what the commands produce (another study's fresh tables): never "dirty" (issue 40's rebuilds)
    assert git_info(repo / "src")["dirty"] is False
    assert git_info(repo / "src", products=repo / "results" / "t")["dirty"] is False
    assert git_info(repo / "src", products=tmp_path / "elsewhere")["dirty"] is False
    (repo / "other.md").write_text("changed\n")
    subprocess.run([*git, "add", "other.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "other"], check=True)
    (repo / "other.md").write_text("changed again\n")
    assert git_info(repo / "src")["dirty"] is True
    assert git_info(repo / "src", products=repo / "other.md")["dirty"] is False
    subprocess.run([*git, "checkout", "-q", "other.md"], check=True)
    (repo / "src" / "code.py").write_text("x = 2\n")
    assert git_info(repo / "src", products=repo / "results" / "t")["dirty"] is True


def test_a_missing_difference_says_why_not_the_seed_count():
    """Issue 66 item 5: with 1 seed a distance cell printed "+nan [n/a: 1 seed]" although the nan came from runs
    with no numeric prediction, not from the seed count."""
    from numlearn.reporting.aggregate import _ci_cell

    nan = float("nan")
    assert _ci_cell({"delta": nan, "ci_low": nan, "ci_high": nan, "n_seeds": 1, "n_seeds_baseline": 1},
                    f=".3f") == "n/a: no numeric prediction on a side"
    assert _ci_cell({"delta": 0.25, "ci_low": nan, "ci_high": nan, "n_seeds": 1, "n_seeds_baseline": 3}) \
        == "+0.2 [n/a: 1 seed]"
    assert _ci_cell({"delta": 2.0, "ci_low": 1.0, "ci_high": 3.0, "significant": True}) == "+2.0 [+1.0, +3.0] *"
