"""numlearn.reporting.reproduction (issue 61 item 5): a reproduction on another machine is judged by the store's
prediction interval for a new seed and by the headline comparisons' signs -- hand-built per-seed accuracies."""

from __future__ import annotations

import pandas as pd
import pytest

from numlearn.reporting.reproduction import cells, headline_signs, prediction_interval, report


def test_the_prediction_interval_by_hand():
    # 4 values: mean 70, sd sqrt(20/3) = 2.582; t_{.975, 3} = 3.182; sqrt(1 + 1/4) = 1.118 -> half 9.19
    lo, hi = prediction_interval([67.0, 69.0, 71.0, 73.0])
    assert lo == pytest.approx(70 - 9.186, abs=1e-3) and hi == pytest.approx(70 + 9.186, abs=1e-3)
    assert prediction_interval([70.0]) != prediction_interval([70.0])  # NaNs: one seed has no spread to read


def _frame(values: dict[tuple[str, int], float], column="t (cot)") -> pd.DataFrame:
    return pd.DataFrame([{"model": "tiny", "loss": loss, "alpha": 0.0 if loss == "mle" else 1.0, "seed": seed,
                          "column": column, "accuracy": acc / 100} for (loss, seed), acc in values.items()])


STORE = _frame({**{("mle", s): 70.0 + d for s, d in zip(range(1, 8), (-3, -1, 1, 3, 0, 2, -2))},
                **{("del", s): 40.0 + d for s, d in zip(range(1, 8), (-3, -1, 1, 3, 0, 2, -2))}})


def test_a_cell_outside_its_interval_is_named_and_one_inside_is_not():
    new = _frame({("mle", 0): 71.0, ("del", 0): 90.0})  # DEL far above the store's 40 +- ~6
    cs = {c.row: c for c in cells(new, STORE)}
    assert cs["mle"].inside and not cs["del"].inside and cs["del"].n_ref == 7
    lines = report(new, STORE, "t (cot)")
    assert lines[0].startswith("seed 0 against the store's other seeds (up to 7; 95% prediction interval for a new "
                               "seed): 1 of 2 cells inside")
    assert any(ln.startswith("  outside: del t (cot) seed 0: 90.0 (interval [") for ln in lines)
    assert not any("outside: mle" in ln for ln in lines)


def test_a_headline_comparison_with_the_other_sign_is_named():
    new = _frame({("mle", 0): 71.0, ("del", 0): 90.0})
    (s,) = headline_signs(new, STORE, "t (cot)")
    assert s["difference"] == pytest.approx(19.0) and s["store_mean"] == pytest.approx(-30.0) and not s["same_sign"]
    lines = report(new, STORE, "t (cot)")
    assert "headline comparisons (each row minus mle, t (cot)): 0 of 1 have the store's sign" in lines
    assert "  other sign: del seed 0: +19.0 (store's mean -30.0)" in lines
    agree = report(_frame({("mle", 0): 71.0, ("del", 0): 41.0}), STORE, "t (cot)")
    assert "headline comparisons (each row minus mle, t (cot)): 1 of 1 have the store's sign" in agree


def test_the_same_seed_in_the_store_is_left_out_of_its_own_interval():
    """The store's seed 0 is the committed draw of the seed a reproduction retrains: the interval is for a new
    seed, so it is read from the store's other seeds."""
    store = pd.concat([STORE, _frame({("mle", 0): 0.0, ("del", 0): 0.0})])
    c = {c.row: c for c in cells(_frame({("mle", 0): 71.0}), store)}
    assert c["mle"].n_ref == 7 and c["mle"].inside


def test_a_tie_is_counted_apart_not_as_the_other_sign():
    new = _frame({("mle", 0): 71.0, ("del", 0): 71.0})  # DEL ties MLE on this seed; the store's mean is -30
    (s,) = headline_signs(new, STORE, "t (cot)")
    assert s["tie"] and s["difference"] == 0
    lines = report(new, STORE, "t (cot)")
    assert "headline comparisons (each row minus mle, t (cot)): 0 of 1 have the store's sign, 1 tied at 0" in lines
    assert not any("other sign" in ln for ln in lines)


def test_a_run_of_another_recipe_says_so():
    from numlearn.reporting.reproduction import recipe_note

    assert recipe_note([]) is None
    note = recipe_note(["train.max_steps: 1500 -> 40", "eval.limit: None -> 10"])
    assert note.startswith("this run's recipe is not the store's (train.max_steps: 1500 -> 40; eval.limit")
    assert "and 2 more" in recipe_note([f"k{i}: 1 -> 2" for i in range(5)])


def test_the_reproduction_verdict_runs_on_the_committed_store_and_names_a_recipe_difference(tmp_path):
    """pipeline.agreement end to end on the committed store: seed 0 read against the other seeds (same recipe: no
    note); the same files with their training steps changed are named as another recipe."""
    import json
    import shutil
    from pathlib import Path

    from numlearn import pipeline
    from numlearn.planning import Row

    repo = Path(__file__).resolve().parents[1]
    committed = repo / "results" / "runs"
    rows = [Row("mle", None), Row("del", 1.28)]
    said = []
    pipeline.agreement(rows, [0], experiment="table1_tiny", store=committed, committed=committed, selected=None,
                       column="synthetic_test (cot)", say=said.append)
    assert said[0].startswith("[reproduce] seed 0 against the store's other seeds") and not any("recipe" in s for s in said)
    mine = tmp_path / "store"
    for run in pipeline.table1_runs(rows, [0], experiment="table1_tiny", store=committed):
        dest = mine / Path(run).relative_to(committed)
        shutil.copytree(run, dest)
        for f in dest.rglob("result.json"):
            d = json.loads(f.read_text())
            d["run"]["recipe"]["train"]["max_steps"] = 40
            f.write_text(json.dumps(d))
    said.clear()
    pipeline.agreement(rows, [0], experiment="table1_tiny", store=mine, committed=committed, selected=None,
                       column="synthetic_test (cot)", say=said.append)
    assert said[0].startswith("[reproduce] this run's recipe is not the store's (train.max_steps: 1000 -> 40)")
