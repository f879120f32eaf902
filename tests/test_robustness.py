"""numlearn.reporting.robustness from hand-made result files: a consistent gain in the declared family is
significant, outside it exploratory; seed noise is not; a bootstrap alone is not enough; below 5 seeds
there is no verdict; val-chosen rows are estimated on fresh seeds; per-seed signs follow the metric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from numlearn.reporting.collect import load_results
from numlearn.reporting.robustness import grid_edges, main, parse_family, robustness

PRIMARY = (("accuracy", "b (cot)", True), ("heldout", "digit_nll", False))


def _write(root: Path, loss, seed, n_correct, nll, n=100, bench="b"):
    d = root / "tiny" / loss / f"seed={seed}" / "eval" / bench / "cot"
    d.mkdir(parents=True, exist_ok=True)
    correct = [1] * n_correct + [0] * (n - n_correct)
    run = {"experiment": "t", "model": "tiny", "loss": loss, "alpha": 1.0, "seed": seed,
           "heldout": {"digit_nll": nll} if nll is not None else None}
    (d / "result.json").write_text(json.dumps({
        "run": run, "benchmark": {"name": bench, "kind": "number"}, "mode": "cot",
        "metrics": {"accuracy": float(np.mean(correct)), "n": n, "numerical_distance": None,
                    "digit_acc_int": {}, "digit_acc_frac": {}},
        "correct_by_id": {str(i): c for i, c in enumerate(correct)}}))


def _table(root, family=(), selection_seeds=(), selected=None, chosen=()):
    df = load_results([root])
    if chosen:
        df["chosen"] = df["loss"].isin(chosen)
    t = robustness(df, primary=PRIMARY, family=parse_family(family), selection_seeds=selection_seeds,
                   selected=selected, n_boot=4000)
    return t.set_index(["loss", "metric"])


def test_a_consistent_gain_is_significant_in_the_family_and_exploratory_outside(tmp_path):
    """+10 points and -0.2 nats on every one of 8 seeds: both intervals exclude 0, and with it in the
    declared family both Holm-adjusted p-values are below 0.05. The same numbers outside the family are
    reported uncorrected, as exploratory; seed noise is not significant either way."""
    root = tmp_path / "r"
    for s in range(8):
        _write(root, "mle", s, 50, 1.2)
        _write(root, "del", s, 60, 1.0)
        _write(root, "ntl", s, 50 + [10, -10][s % 2], 1.2 + [0.1, -0.1][s % 2])  # seed noise only
    t = _table(root, family=["del/accuracy", "ntl/accuracy"])
    gain = t.loc[("del", "accuracy: b (cot)")]
    assert gain["verdict"] == "significant" and gain["better_seeds"] == "8/8" and gain["in_family"]
    assert abs(gain["delta"] - 10.0) < 1e-9 and gain["t_ci_low"] == gain["t_ci_high"] == 10.0  # no spread
    assert gain["holm_p_t"] < 0.05 and gain["holm_p_boot"] < 0.05
    assert t.loc[("del", "heldout: digit_nll"), "verdict"] == "exploratory: both exclude 0 (uncorrected)"
    assert t.loc[("del", "heldout: digit_nll"), "better_seeds"] == "8/8"  # lower NLL counts as better
    noise = t.loc[("ntl", "accuracy: b (cot)")]
    assert noise["verdict"] == "not significant" and noise["better_seeds"] == "4/8"
    # Holm over the two family members, in the order given: min(1, 2 p_min), then max(that, p_max)
    pt = sorted([gain["p_t"], noise["p_t"]])
    assert sorted([gain["holm_p_t"], noise["holm_p_t"]]) == [min(1, 2 * pt[0]), max(min(1, 2 * pt[0]), pt[1])]


def test_a_bootstrap_that_excludes_zero_is_not_enough_when_the_t_interval_does_not(tmp_path):
    """Per-seed gains (+8 x 5, -4, -4, 0) over 2,000 problems each: the seed-level percentile bootstrap is
    narrower than the t-interval (k = 8) and excludes zero where t does not -- no significance call."""
    root = tmp_path / "r"
    gains = [8, 8, 8, 8, 8, -4, -4, 0]
    for s in range(8):
        _write(root, "mle", s, 1000, 1.2, n=2000)
        _write(root, "dist2", s, 1000 + 20 * gains[s], 1.2, n=2000)
    r = _table(root, family=["dist2/accuracy"]).loc[("dist2", "accuracy: b (cot)")]
    assert r["ci_low"] > 0 and r["t_ci_low"] < 0 < r["t_ci_high"]
    # the t-interval by hand: mean 4, sd sqrt(224 / 7) = 5.6569, t_.975,7 = 2.3646 -> 4 -+ 4.729
    assert abs(r["t_mean"] - 4.0) < 1e-9 and abs(r["t_ci_low"] - (4 - 2.364624 * 32 ** 0.5 / 8 ** 0.5)) < 1e-4
    assert r["verdict"] == "not significant"


def test_below_five_seeds_there_is_no_verdict_only_per_seed_values(tmp_path):
    root = tmp_path / "r"
    for s in range(3):
        _write(root, "mle", s, 50, 1.2)
        _write(root, "del", s, 60 + s, 1.0)
    t = _table(root, family=["del/accuracy"])
    r = t.loc[("del", "accuracy: b (cot)")]
    assert r["verdict"].startswith("no verdict (3 seeds < 5)") and r["per_seed_diff"] == "+10;+11;+12"
    assert np.isnan(r["holm_p_t"])  # not counted in the family's correction


def test_val_chosen_rows_are_estimated_on_fresh_seeds_and_grid_edges_flagged(tmp_path):
    """The sweep trained seeds 0-2: a val-chosen row and MLE are compared on seeds 3-7 only (the lucky
    selection seeds, +30 here, are left out), and a weight at the lowest grid point says so."""
    root = tmp_path / "r"
    for s in range(8):
        _write(root, "mle", s, 50, 1.2)
        _write(root, "dist2", s, 80 if s < 3 else 52, 1.2)
    sel = {"dist2": {"alpha": 1.0, "candidates": {"1.0": 1, "10.0": 0, "100.0": 0}}}
    r = _table(root, selection_seeds=[0, 1, 2], selected=sel, chosen=["dist2"])
    r = r.loc[("dist2 (alpha=1.0, val-chosen)", "accuracy: b (cot)")]
    assert r["seeds"] == "3,4,5,6,7" and r["fresh_seeds_only"] and abs(r["delta"] - 2.0) < 1e-9
    assert r["grid_edge"] == "lowest"
    assert grid_edges({"x": {"alpha": 1.0, "candidates": {"0.1": 0, "1.0": 0, "10.0": 0}}}) == {}


def test_a_family_entry_without_a_row_or_malformed_is_an_error(tmp_path):
    root = tmp_path / "r"
    for s in range(5):
        _write(root, "mle", s, 50, 1.2)
        _write(root, "del", s, 60, 1.0)
    with pytest.raises(ValueError, match="del_paper:0.32/accuracy"):
        _table(root, family=["del_paper:0.32/accuracy"])
    with pytest.raises(ValueError, match="ROW\\[:ALPHA\\]/METRIC"):
        parse_family(["del:accuracy"])


def test_cli_writes_the_table_and_names_missing_metrics(tmp_path, capsys):
    root, other = tmp_path / "r", tmp_path / "o"
    for s in range(5):
        _write(root, "mle", s, 50, None, bench="synthetic_test")
        _write(root, "del", s, 60, None, bench="synthetic_test")
        _write(other, "mle", s, 50, None)
        _write(other, "del", s, 60, None)
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--big-boot", "500", "--family", "del/accuracy"]) == 0
    md = (out / "robustness.md").read_text()
    assert md.startswith("<!-- generated by numlearn.reporting.robustness;")
    row = next(ln for ln in md.splitlines() if ln.startswith("| del "))
    assert re.search(r"\| accuracy: synthetic_test \(cot\) \| +5 \| \+10\.0 \[", row), row
    assert row.rstrip(" |").endswith("significant")
    # the default primary metrics name Table 1's columns and held-out metrics: none is in these files
    assert main([str(other), "--out", str(out)]) == 2
    assert "no primary metric" in capsys.readouterr().err
    # it reads its input as the table does: excluding every benchmark leaves nothing, a named error
    assert main([str(root), "--out", str(out), "--exclude-benchmarks", "synthetic_test"]) == 2
    assert "no results left after excluding benchmarks ['synthetic_test']" in capsys.readouterr().err


def test_a_held_out_interval_is_labelled_seeds_only_and_its_verdict_rests_on_the_t(tmp_path):
    """Issue 61 item 2: the held-out digit metrics are one value per trained model, so their bootstrap resamples
    seeds only (p = 0 whenever every seed moves one way); the row says so and a significant verdict names the t."""
    root = tmp_path / "r"
    for s in range(8):
        _write(root, "mle", s, 50, 1.2 + 0.01 * s)
        _write(root, "del", s, 60, 1.0 + 0.02 * (s % 3))
    t = _table(root, family=["del/accuracy", "del/digit_nll"])
    held, acc = t.loc[("del", "heldout: digit_nll")], t.loc[("del", "accuracy: b (cot)")]
    assert held["interval"] == "seeds only" and acc["interval"] == "seeds x problems"
    assert held["p_boot"] == 0.0 and held["verdict"] == "significant (rests on the t: seeds-only bootstrap)"
    assert acc["verdict"] == "significant"
    out = tmp_path / "out"
    assert main([str(root), "--out", str(out), "--big-boot", "500", "--family", "del/digit_nll",
                 "--primary-benchmark", "b"]) == 0
    md = (out / "robustness.md").read_text()
    nll = next(ln for ln in md.splitlines() if ln.startswith("| del ") and "digit_nll" in ln)
    assert "] † |" in nll and "seeds only (†) for the held-out digit metrics" in md
