"""MLE tuned as the numeric losses are (issue 59 item 3): the learning-rate rows, the rate's choice on a
validation column, and every table's comparison against the tuned MLE instead of the untuned one -- hand-built
result files whose differences can be checked by eye."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from numlearn.planning import Row, rate_row
from numlearn.reporting.aggregate import aggregate
from numlearn.reporting.collect import load_results
from numlearn.reporting.robustness import robustness
from numlearn.reporting.sweep import select_rate

PRIMARY = (("accuracy", "b (cot)", True),)


def test_rate_rows_keep_the_recipes_own_rate_as_the_plain_row():
    assert rate_row("mle", 0.003, 0.003) == Row("mle")
    r = rate_row("mle", 0.0015, 0.003)
    assert r.overrides() == ["loss=mle", "loss.tag=mle_lr0.0015", "train.learning_rate=0.0015"]
    assert rate_row("mle", 0.012, 0.003).extra[0] == "loss.tag=mle_lr0.012"  # its own run dirs


def _sweep_table(accs: dict[str, float], seeds: dict[str, int] | None = None) -> pd.DataFrame:
    return pd.DataFrame([{"loss": k, "alpha": 0.0, "column": "v (cot)", "acc": a, "seeds": (seeds or {}).get(k, 3)}
                         for k, a in accs.items()])


def test_the_rate_with_the_best_validation_mean_is_chosen_ties_to_the_recipes_rate():
    rates = {"mle_lr0.0015": 0.0015, "mle": 0.003, "mle_lr0.006": 0.006}
    chosen, pending = select_rate(_sweep_table({"mle_lr0.0015": 70.0, "mle": 71.0, "mle_lr0.006": 80.5}),
                                  "v (cot)", rates, 0.003, 3)
    assert pending == [] and chosen["label"] == "mle_lr0.006" and chosen["learning_rate"] == 0.006
    assert chosen["candidates"] == {"0.0015": 70.0, "0.003": 71.0, "0.006": 80.5}
    tie, _ = select_rate(_sweep_table({"mle_lr0.0015": 71.0, "mle": 71.0, "mle_lr0.006": 71.0}), "v (cot)", rates,
                         0.003, 3)
    assert tie["label"] == "mle"  # a tie keeps the untuned recipe: tuning must earn its change
    tie, _ = select_rate(_sweep_table({"mle_lr0.0015": 71.0, "mle": 60.0, "mle_lr0.006": 71.0}), "v (cot)", rates,
                         0.003, 3)
    assert tie["label"] == "mle_lr0.0015"  # then the lower rate


def test_no_rate_is_chosen_until_every_rate_has_its_seeds_nor_on_a_test_split():
    rates = {"mle": 0.003, "mle_lr0.006": 0.006}
    chosen, pending = select_rate(_sweep_table({"mle": 71.0, "mle_lr0.006": 99.0}, {"mle_lr0.006": 2}), "v (cot)",
                                  rates, 0.003, 3)
    assert chosen is None and pending == ["mle_lr0.006 (2 seeds)"]
    chosen, pending = select_rate(_sweep_table({"mle": 71.0}), "v (cot)", rates, 0.003, 3)
    assert chosen is None and pending == ["mle_lr0.006 (0 seeds)"]
    with pytest.raises(ValueError, match="validation split"):
        select_rate(_sweep_table({"mle": 1.0}), "synthetic_test (cot)", {"mle": 0.003}, 0.003, 1)


def _write(root: Path, loss, seed, n_correct, n=100, tag=None):
    d = root / "tiny" / (tag or loss) / f"seed={seed}" / "eval" / "b" / "cot"
    d.mkdir(parents=True, exist_ok=True)
    correct = [1] * n_correct + [0] * (n - n_correct)
    run = {"experiment": "t", "model": "tiny", "loss": loss, "alpha": 0.0 if loss == "mle" else 1.0, "seed": seed,
           **({"loss_tag": tag} if tag else {})}
    (d / "result.json").write_text(json.dumps({
        "run": run, "benchmark": {"name": "b", "kind": "number"}, "mode": "cot",
        "metrics": {"accuracy": float(np.mean(correct)), "n": n, "numerical_distance": None,
                    "digit_acc_int": {}, "digit_acc_frac": {}},
        "correct_by_id": {str(i): c for i, c in enumerate(correct)}}))


def _three_rows(root: Path) -> None:
    """Untuned MLE 50 %, the tuned MLE 60 %, DEL 58 % on every one of 5 seeds: DEL beats the untuned MLE by 8
    points and loses 2 to the tuned one."""
    for s in range(3, 8):
        _write(root, "mle", s, 50)
        _write(root, "mle", s, 60, tag="mle_lr0.006")
        _write(root, "del", s, 58)


def test_robustness_compares_with_the_tuned_mle_when_named(tmp_path):
    _three_rows(tmp_path)
    df = load_results([tmp_path])
    untuned = robustness(df, primary=PRIMARY, n_boot=2000).set_index("loss")
    tuned = robustness(df, primary=PRIMARY, n_boot=2000, baseline="mle_lr0.006").set_index("loss")
    assert untuned.loc["del", "delta"] == pytest.approx(8.0) and untuned.loc["mle_lr0.006", "delta"] == pytest.approx(10)
    assert tuned.loc["del", "delta"] == pytest.approx(-2.0) and tuned.loc["mle", "delta"] == pytest.approx(-10.0)
    assert "mle_lr0.006" not in tuned.index
    with pytest.raises(ValueError, match="no 'mle_lr9' row"):
        robustness(df, primary=PRIMARY, n_boot=200, baseline="mle_lr9")


def test_table1_names_the_tuned_baseline_in_its_headings(tmp_path):
    _three_rows(tmp_path / "r")
    res = aggregate([tmp_path / "r"], tmp_path / "out", reference=False, n_boot=500, baseline="mle_lr0.006")
    assert "## Each loss minus `mle_lr0.006`, accuracy points" in res["markdown"]
    assert "minus MLE" not in res["markdown"]
    boot = res["bootstrap"].set_index("loss")
    assert boot[boot["column"] == "b (cot)"].loc["del", "delta"] == pytest.approx(-2.0)


def test_the_study_plans_the_rates_then_the_chosen_rate_on_fresh_seeds_then_tables_against_it(tmp_path, monkeypatch):
    """``python -m numlearn.pipeline mle-lr``, the jobs and the sweep's table recorded: stage 1 plans the five
    rates on the sweep's seeds on the validation split, stage 2 chooses the best mean (0.006 here), stage 3 trains
    it with Table 1's rows on the fresh seeds and tables every row minus it."""
    from numlearn import pipeline
    from numlearn.reporting import sweep

    requests = []
    monkeypatch.setattr(pipeline, "_run_planned", lambda reqs, common, jobs, live: requests.extend(reqs) or 0)
    accs = {"mle_lr0.00075": 40.0, "mle_lr0.0015": 60.0, "mle": 71.0, "mle_lr0.006": 79.0, "mle_lr0.012": 55.0}

    def fake_sweep(argv):
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        _sweep_table(accs).assign(column=pipeline.VAL_COLUMN).to_csv(out / "sweep.csv", index=False)
        (out / "sweep.md").write_text("# sweep\n")
        return 0

    monkeypatch.setattr(sweep, "main", fake_sweep)
    calls = []
    monkeypatch.setattr(pipeline, "build_tables", lambda rows, seeds, out, **kw: calls.append(
        dict(rows=rows, seeds=seeds, out=out, **kw)) or 0)
    assert pipeline.main(["mle-lr", "--seeds", "3-7", "--out", str(tmp_path / "o"), "--store", str(tmp_path / "s")]) == 0
    stage1, stage3 = requests
    assert [r.label for r in stage1.rows] == ["mle+loss.tag=mle_lr0.00075+train.learning_rate=0.00075",
                                              "mle+loss.tag=mle_lr0.0015+train.learning_rate=0.0015", "mle",
                                              "mle+loss.tag=mle_lr0.006+train.learning_rate=0.006",
                                              "mle+loss.tag=mle_lr0.012+train.learning_rate=0.012"]
    assert stage1.seeds == (0, 1, 2) and stage1.evaluate == (pipeline.VAL_EVAL,)
    assert stage3.seeds == (3, 4, 5, 6, 7) and stage3.evaluate == ()
    assert [r.label for r in stage3.rows][:2] == ["mle", "mle+loss.tag=mle_lr0.006+train.learning_rate=0.006"]
    tables, ablation = calls  # Table 1's rows, then the ablation's (from the store) against the same tuned MLE
    assert tables["report"].baseline == "mle_lr0.006" and tables["seeds"] == [3, 4, 5, 6, 7]
    assert tables["report"].may_differ == ("train.learning_rate",)
    assert ablation["out"] == tmp_path / "o" / "ablation" and ablation["report"].baseline == "mle_lr0.006"
    labels = [r.label for r in ablation["rows"]]
    assert labels[0] == "mle+loss.tag=mle_lr0.006+train.learning_rate=0.006" and "del_paper" in labels
    assert "del_ce:1.28" in labels and ablation["selected"] == pipeline.ABLATION_OUT / "sweep" / "selected.json"
    chosen = json.loads((tmp_path / "o" / "sweep" / "selected_lr.json").read_text())
    assert chosen["learning_rate"] == 0.006 and chosen["default"] == 0.003
    assert "mle: learning rate 0.006 (row `mle_lr0.006`)" in (tmp_path / "o" / "sweep" / "sweep.md").read_text()


def test_a_table_without_mle_still_builds_but_a_named_baseline_must_be_there(tmp_path):
    """A table of DEL alone (a shrunken rehearsal) has no comparisons, as before; naming a baseline it lacks is
    refused in one line rather than tabling every row against nothing."""
    for s in range(3, 6):
        _write(tmp_path / "r", "del", s, 58)
    res = aggregate([tmp_path / "r"], tmp_path / "o1", reference=False, n_boot=100)
    assert "minus" not in res["markdown"]
    with pytest.raises(ValueError, match="no 'mle_lr0.006' row"):
        aggregate([tmp_path / "r"], tmp_path / "o2", reference=False, n_boot=100, baseline="mle_lr0.006")


def test_a_table_of_learning_rates_may_differ_in_that_key_only():
    """The tuned MLE's runs differ from the others in train.learning_rate: a table may be told to accept that key
    and still refuses any other difference (a preset changed between sittings)."""
    from numlearn.records import ResultRecord
    from numlearn.reporting.collect import check_one_recipe, shared_recipe

    def rec(**train):
        return ResultRecord(benchmark={"name": "b"}, mode="cot", metrics={"accuracy": 0.5, "n": 2},
                            run={"recipe": {"model": {"name": "tiny"}, "data": {"n": 1},
                                            "train": {"learning_rate": 0.003, "max_steps": 1000, **train},
                                            "loss": {"name": "mle"}, "seed": 0}})

    tuned, other = rec(learning_rate=0.0015), rec(max_steps=40)
    with pytest.raises(ValueError, match="train.learning_rate: 0.003 -> 0.0015"):
        check_one_recipe({"a": shared_recipe(rec()), "b": shared_recipe(tuned)})
    check_one_recipe({"a": shared_recipe(rec(), ("train.learning_rate",)),
                      "b": shared_recipe(tuned, ("train.learning_rate",))})
    with pytest.raises(ValueError, match="train.max_steps: 1000 -> 40"):
        check_one_recipe({"a": shared_recipe(rec(), ("train.learning_rate",)),
                          "b": shared_recipe(other, ("train.learning_rate",))})


def test_val_chosen_cells_say_when_they_include_the_selection_seeds(tmp_path):
    """Issue 61 item 4: a val-chosen row's 8-seed mean includes the 3 seeds its weight was chosen on; the table
    says so (and where the fresh-seed estimate is), and says nothing when only fresh seeds are tabled."""
    import json as _json

    for s in range(0, 6):
        _write(tmp_path / "r", "mle", s, 50)
        _write(tmp_path / "r", "del", s, 58)
    sel = tmp_path / "selected.json"
    sel.write_text(_json.dumps({"del": {"alpha": 1.0, "accuracy": 60.0, "seeds": 3}}))
    from numlearn.reporting.aggregate import Selection

    res = aggregate([tmp_path / "r"], tmp_path / "o", reference=False, n_boot=100, select=Selection(selected=sel))
    assert "include the selection seeds (0, 1, 2), so lean optimistic" in res["markdown"]
    fresh = tmp_path / "fresh"
    for s in range(3, 6):
        _write(fresh, "mle", s, 50)
        _write(fresh, "del", s, 58)
    res = aggregate([fresh], tmp_path / "o2", reference=False, n_boot=100, select=Selection(selected=sel))
    assert "val-chosen" in res["markdown"] and "chosen on (" not in res["markdown"]
