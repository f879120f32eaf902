"""Seed-aware intervals (numlearn.reporting.stats): hand-made designs where the answer is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from numlearn.reporting.aggregate import aggregate
from numlearn.reporting.stats import multi_column_bootstrap, seed_bootstrap, seed_problem_bootstrap


def _runs(rng, accs, n=200):
    """[len(accs), n] 0/1 matrix: seed i answers a fixed random subset of size accs[i]*n."""
    out = np.zeros((len(accs), n))
    for i, a in enumerate(accs):
        out[i, rng.permutation(n)[: int(round(a * n))]] = 1
    return out


def test_seed_noise_makes_the_interval_wide_and_not_significant():
    rng = np.random.default_rng(0)
    a = _runs(rng, [0.95, 0.35] * 4)  # a loss whose runs swing by 60 points from seed to seed, mean 0.65
    b = _runs(rng, [0.55] * 8)
    d = seed_problem_bootstrap(a, b, n_boot=4000, seed=1)
    assert d.delta == pytest.approx(0.10)
    # problems only: 8 runs averaged per problem look precise and "exclude zero"
    assert d.problem_ci_low > 0
    # seeds and problems: the seed-to-seed swing dominates (sd of an 8-seed mean ~ 0.3/sqrt(8))
    assert d.ci_low < 0 < d.ci_high and not d.significant
    assert (d.ci_high - d.ci_low) > 2.5 * (d.problem_ci_high - d.problem_ci_low)


def test_a_consistent_difference_is_significant():
    rng = np.random.default_rng(0)
    a = _runs(rng, [0.80, 0.78, 0.82, 0.79, 0.81, 0.80, 0.77, 0.83])
    b = _runs(rng, [0.50, 0.52, 0.48, 0.51, 0.49, 0.50, 0.53, 0.47])
    d = seed_problem_bootstrap(a, b, n_boot=2000)
    assert d.delta == pytest.approx(0.30, abs=1e-9)
    assert d.ci_low > 0.15 and d.significant and d.paired_seeds and d.n_seeds == 8


def test_constant_difference_gives_a_point_interval():
    a, b = np.ones((4, 10)), np.zeros((4, 10))
    d = seed_problem_bootstrap(a, b, n_boot=100)
    assert (d.delta, d.ci_low, d.ci_high, d.problem_ci_low, d.problem_ci_high) == (1.0, 1.0, 1.0, 1.0, 1.0)


def test_too_few_seeds_is_never_significant():
    one = seed_problem_bootstrap(np.ones((1, 50)), np.zeros((1, 50)))
    assert np.isnan(one.ci_low) and np.isnan(one.ci_high) and not one.significant
    assert one.problem_ci_low == 1.0  # the secondary interval still exists
    two = seed_problem_bootstrap(np.ones((2, 50)), np.zeros((2, 50)))
    assert two.ci_low == 1.0 and not two.significant  # the interval excludes 0, but 2 seeds are too few


def test_pairing_by_seed_removes_shared_seed_effects():
    rng = np.random.default_rng(3)
    offsets = [0.2, -0.2, 0.1, -0.1, 0.25, -0.25]  # seed s is good or bad for both losses alike
    a = _runs(rng, [0.6 + o for o in offsets])
    b = _runs(rng, [0.5 + o for o in offsets])
    paired = seed_problem_bootstrap(a, b, seeds_a=range(6), seeds_b=range(6), n_boot=3000)
    unpaired = seed_problem_bootstrap(a, b, seeds_a=range(6), seeds_b=range(10, 16), n_boot=3000)
    assert paired.paired_seeds and not unpaired.paired_seeds
    assert paired.delta == unpaired.delta
    assert (paired.ci_high - paired.ci_low) < 0.6 * (unpaired.ci_high - unpaired.ci_low)
    assert paired.significant and not unpaired.significant


def test_macc_difference_is_the_mean_of_the_columns():
    rng = np.random.default_rng(0)
    cols_a = [_runs(rng, [0.7] * 3, 40), _runs(rng, [0.2] * 3, 60)]
    cols_b = [_runs(rng, [0.5] * 3, 40), _runs(rng, [0.3] * 3, 60)]
    d1, d2, dm = multi_column_bootstrap(cols_a, cols_b, n_boot=500)
    assert d1.delta == pytest.approx(0.2) and d2.delta == pytest.approx(-0.1)
    assert dm.delta == pytest.approx(0.05) and dm.n_problems == 100


def test_missing_scores_average_per_seed_like_the_table():
    """Numerical distance is NaN where a prediction is not a number: each seed's mean is over the
    problems it scored (the table's per-seed metric), not a pooled mean over all scored cells."""
    nan = np.nan
    a = np.array([[1.0, nan, nan, nan],    # seed 0: 1.0 over one scored problem
                  [3.0, 3.0, 3.0, 3.0]])   # seed 1: 3.0 -> per-seed mean 2.0 (pooled would be 2.6)
    b = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    d = seed_problem_bootstrap(a, b, n_boot=2000, seed=0)
    assert d.delta == pytest.approx(1.0)
    assert np.isfinite(d.ci_low) and d.ci_low >= 0.0 - 1e-12 and d.ci_high <= 2.0 + 1e-12
    # replicates drawing only seed 1 give +2, only seed 0 give 0: both ends are reached
    assert d.ci_high == pytest.approx(2.0) and d.ci_low == pytest.approx(0.0)
    # without NaN the estimator is the plain mean, as for 0/1 correctness
    rng = np.random.default_rng(5)
    x, y = rng.random((3, 30)), rng.random((3, 30))
    assert seed_problem_bootstrap(x, y).delta == pytest.approx(x.mean() - y.mean())


def test_distance_minus_mle_table_from_hand_made_results(tmp_path):
    """distance_by_id reaches a seed-aware 'minus MLE' distance table (NaN-aware, no mACC)."""
    for s in range(4):
        for loss, dist in (("mle", 0.5), ("del", 0.2)):
            d = tmp_path / "r" / loss / f"seed={s}" / "eval" / "b" / "cot"
            d.mkdir(parents=True)
            dists = {str(i): (None if i % 5 == 0 else dist + 0.01 * s) for i in range(50)}
            (d / "result.json").write_text(json.dumps({
                "run": {"experiment": "t", "model": "tiny", "loss": loss, "alpha": 1.0, "seed": s},
                "benchmark": {"name": "b", "kind": "number"}, "mode": "cot",
                "metrics": {"accuracy": 0.5, "n": 50, "numerical_distance": dist + 0.01 * s,
                            "digit_acc_int": {}, "digit_acc_frac": {}},
                "correct_by_id": {str(i): i % 2 for i in range(50)}, "distance_by_id": dists}))
    aggregate([tmp_path / "r"], tmp_path / "out", command="pytest", reference=False, n_boot=500)
    t = __import__("pandas").read_csv(tmp_path / "out" / "distance_vs_mle.csv")
    assert list(t["column"]) == ["b (cot)"] and t["delta"].iloc[0] == pytest.approx(-0.3)
    assert t["ci_low"].iloc[0] == pytest.approx(-0.3) and bool(t["significant"].iloc[0])
    assert "-0.300 [-0.300, -0.300] *" in (tmp_path / "out" / "table1.md").read_text()


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="same problems"):
        seed_problem_bootstrap(np.ones((3, 10)), np.ones((3, 11)))


def test_seed_bootstrap_of_per_run_scalars():
    d = seed_bootstrap([0.62, 0.64, 0.63, 0.65], [0.60, 0.61, 0.62, 0.61], n_boot=2000)
    assert d.delta == pytest.approx(0.025) and d.ci_low > 0 and d.significant
    noisy = seed_bootstrap([0.9, 0.3, 0.9, 0.3], [0.55, 0.56, 0.54, 0.55])
    assert noisy.ci_low < 0 < noisy.ci_high and not noisy.significant


def _write(root: Path, loss, seed, correct, heldout=None):
    d = root / "tiny" / loss / f"seed={seed}" / "eval" / "b" / "cot"
    d.mkdir(parents=True, exist_ok=True)
    run = {"experiment": "t", "model": "tiny", "loss": loss, "alpha": 1.0, "seed": seed, "heldout": heldout}
    (d / "result.json").write_text(json.dumps({
        "run": run, "benchmark": {"name": "b", "kind": "number"}, "mode": "cot",
        "metrics": {"accuracy": float(np.mean(correct)), "n": len(correct), "numerical_distance": None,
                    "digit_acc_int": {}, "digit_acc_frac": {}},
        "correct_by_id": {str(i): int(c) for i, c in enumerate(correct)}}))


def test_table_reports_seed_noise_as_no_difference(tmp_path):
    """Hand-made result files where a problem-only interval would call DEL better: the table's primary
    interval spans zero, carries no `*`, and the problem-only one is shown as secondary."""
    rng = np.random.default_rng(0)
    a, b = _runs(rng, [0.95, 0.35] * 4), _runs(rng, [0.55] * 8)
    for s in range(8):
        _write(tmp_path / "r", "del", s, a[s], {"digit_acc": [0.9, 0.3][s % 2], "digit_nll": 1.0})
        _write(tmp_path / "r", "mle", s, b[s], {"digit_acc": 0.55 + 0.001 * s, "digit_nll": 1.2})
    res = aggregate([tmp_path / "r"], tmp_path / "out", command="pytest", reference=False, n_boot=2000)
    row = res["bootstrap"].set_index("column").loc["b (cot)"]
    assert row["delta"] == pytest.approx(10.0) and row["ci_low"] < 0 < row["ci_high"] and not row["significant"]
    assert row["problem_ci_low"] > 0
    md = (tmp_path / "out" / "table1.md").read_text()
    cells = [[c.strip() for c in ln.split("|")[1:-1]] for ln in md.splitlines() if ln.startswith("|")]
    line = " | ".join(next(c for c in cells if c[:3] == ["tiny", "del", "8 vs 8 (paired)"]))
    assert "+10.0 [" in line and "*" not in line
    assert "problem-only 95% CI" in md
    held = (tmp_path / "out" / "heldout_vs_mle.csv").read_text()
    assert "digit_acc" in held and "digit_nll" in held
    hl = " | ".join(next(c for c in cells if c[:2] == ["tiny", "del"] and "-0.200" in " ".join(c)))
    assert "-0.200 [-0.200, -0.200] *" in hl  # NLL 1.0 vs 1.2 on every seed: a point interval, significant
    assert "+4.6 [" in hl  # digit acc in points: 60.0 - 55.35


def _write_val(root: Path, loss, alpha, seed, acc, bench="synthetic_val", n=100):
    d = root / loss / f"alpha={alpha}" / f"seed={seed}" / "eval" / bench / "cot"
    d.mkdir(parents=True, exist_ok=True)
    correct = [1] * int(round(acc * n)) + [0] * (n - int(round(acc * n)))
    (d / "result.json").write_text(json.dumps({
        "run": {"experiment": "t", "model": "tiny", "loss": loss, "alpha": alpha, "seed": seed},
        "benchmark": {"name": bench, "kind": "number"}, "mode": "cot",
        "metrics": {"accuracy": acc, "n": n, "numerical_distance": 0.5, "digit_acc_int": {}, "digit_acc_frac": {}},
        "correct_by_id": {str(i): c for i, c in enumerate(correct)}}))


def test_sweep_chooses_on_validation_with_seed_intervals(tmp_path):
    from numlearn.reporting.sweep import main

    accs = {0.1: [0.30, 0.32, 0.31], 1.28: [0.50, 0.20, 0.44], 2.56: [0.40, 0.40, 0.40]}
    for a, per_seed in accs.items():
        for s, v in enumerate(per_seed):
            _write_val(tmp_path / "r", "del", a, s, v)
            _write_val(tmp_path / "r", "del", a, s, 0.9, bench="synthetic_test")  # must not decide anything
    for s, v in enumerate([0.35, 0.36, 0.34]):
        _write_val(tmp_path / "r", "mle", 0.0, s, v)
    out = tmp_path / "out"
    assert main([str(tmp_path / "r"), "--out", str(out), "--select-on", "synthetic_val (cot)"]) == 0
    chosen = json.loads((out / "selected.json").read_text())["del"]
    assert chosen["alpha"] == 2.56 and chosen["seeds"] == 3  # 40.0 mean beats 38.0 (1.28) and 31.0 (0.1)
    t = __import__("pandas").read_csv(out / "sweep.csv")
    row = t[(t["alpha"] == 1.28) & (t["column"] == "synthetic_val (cot)")].iloc[0]
    assert row["acc"] == pytest.approx(38.0) and row["acc_ci_low"] < 30 and row["acc_ci_high"] > 45
    flat = t[(t["alpha"] == 2.56) & (t["column"] == "synthetic_val (cot)")].iloc[0]
    assert flat["acc_ci_low"] == pytest.approx(40.0) and flat["acc_ci_high"] == pytest.approx(40.0)
    assert (out / "sweep.png").stat().st_size > 0
    # choosing on a test split is refused
    assert main([str(tmp_path / "r"), "--out", str(out), "--select-on", "synthetic_test (cot)"]) == 2


def test_a_loss_without_a_weight_is_read_from_its_results_not_its_name(tmp_path):
    """Issue 43: "has no weight" is what a loss's results record (alpha 0 on every run: build_loss refuses
    another), not a name in reporting. MixCE beside MLE is a baseline line, never a grid to choose on; a
    weighted loss whose grid includes 0 is still a weighted loss."""
    from numlearn.reporting.sweep import main, unweighted

    for s in range(3):
        _write_val(tmp_path / "r", "mle", 0.0, s, 0.35)
        _write_val(tmp_path / "r", "mixce", 0.0, s, 0.90)  # would win if it were treated as a grid point
        for a, v in ((0.0, 0.2), (0.1, 0.30), (1.28, 0.45)):
            _write_val(tmp_path / "r", "del", a, s, v)
    out = tmp_path / "out"
    assert main([str(tmp_path / "r"), "--out", str(out), "--select-on", "synthetic_val (cot)"]) == 0
    chosen = json.loads((out / "selected.json").read_text())
    assert set(chosen) == {"del"} and chosen["del"]["alpha"] == 1.28
    t = __import__("pandas").read_csv(out / "sweep.csv")
    assert unweighted(t) == {"mle", "mixce"}


def test_sweep_refuses_to_choose_from_an_unfinished_sweep(tmp_path, capsys):
    """A sweep produced over several sittings: a grid point with too few seeds, or not run at all,
    must not let a weight be chosen (here the unfinished 1.28 would otherwise win on its one seed)."""
    from numlearn.reporting.sweep import main

    for a, per_seed in {0.1: [0.30, 0.32, 0.31], 1.28: [0.60]}.items():
        for s, v in enumerate(per_seed):
            _write_val(tmp_path / "r", "del", a, s, v)
    for s in range(3):
        _write_val(tmp_path / "r", "mle", 0.0, s, 0.35)
    out = tmp_path / "out"
    (out).mkdir()
    (out / "selected.json").write_text("{}")  # a choice left by an earlier sweep must not survive
    args = [str(tmp_path / "r"), "--out", str(out), "--select-on", "synthetic_val (cot)"]
    assert main(args + ["--min-seeds", "3"]) == 2
    err = capsys.readouterr().err
    assert "del@1.28 (1 seeds)" in err and "make sweep-alpha" in err
    assert not (out / "selected.json").exists() and "No weight chosen" in (out / "sweep.md").read_text()
    # a grid point never run counts as missing too
    assert main(args + ["--min-seeds", "1", "--expect", "del=0.1,1.28,2.56"]) == 2
    assert "del@2.56 (0 seeds)" in capsys.readouterr().err
    assert main(args + ["--min-seeds", "1", "--expect", "del=0.1,1.28", "--expect", "mle=0"]) == 0
    assert json.loads((out / "selected.json").read_text())["del"]["alpha"] == 1.28
    assert main(args + ["--expect", "del"]) == 2  # malformed grid: named, not ignored
    assert "LOSS=ALPHA" in capsys.readouterr().err


def test_sweep_chooses_a_loss_whose_grid_is_finished_while_another_is_pending(tmp_path, capsys):
    """A loss's choice reads only its own points: a finished DEL grid is chosen while NTL's is still
    running; NTL stays out of selected.json, is named, and the command exits 2 (the sweep is unfinished).
    A point outside the declared grid (an earlier sweep's 5.0) never wins."""
    from numlearn.reporting.sweep import main

    for a, per_seed in {0.1: [0.50, 0.52, 0.51], 1.28: [0.30, 0.32, 0.31], 5.0: [0.90, 0.90, 0.90]}.items():
        for s, v in enumerate(per_seed):
            _write_val(tmp_path / "r", "del", a, s, v)
    for a, per_seed in {1.0: [0.40, 0.40, 0.40], 12.8: [0.80]}.items():  # NTL's 12.8 has one seed of three
        for s, v in enumerate(per_seed):
            _write_val(tmp_path / "r", "ntl", a, s, v)
    out = tmp_path / "out"
    args = [str(tmp_path / "r"), "--out", str(out), "--select-on", "synthetic_val (cot)", "--min-seeds", "3",
            "--expect", "del=0.1,1.28", "--expect", "ntl=1.0,12.8", "--expect", "mle=0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "ntl@12.8 (1 seeds)" in err and "del@" not in err and "mle@" not in err
    chosen = json.loads((out / "selected.json").read_text())
    assert set(chosen) == {"del"} and chosen["del"]["alpha"] == 0.1 and set(chosen["del"]["candidates"]) == {"0.1", "1.28"}
    md = (out / "sweep.md").read_text()
    assert "- del: alpha = 0.1" in md and "Not chosen yet" in md and "ntl" in md.split("Not chosen yet")[1]
    assert md.startswith("<!-- generated by numlearn.reporting.sweep;")
    _write_val(tmp_path / "r", "ntl", 12.8, 1, 0.80)
    _write_val(tmp_path / "r", "ntl", 12.8, 2, 0.80)
    assert main(args) == 0
    assert {k: v["alpha"] for k, v in json.loads((out / "selected.json").read_text()).items()} == {"del": 0.1, "ntl": 12.8}


def test_seed_mean_ci_covers_the_seed_spread_and_needs_two_seeds():
    import math

    from numlearn.reporting.stats import seed_mean_ci

    lo, hi = seed_mean_ci([47.5, 54.5, 81.0])  # a wide seed spread gives a wide interval around the mean 61
    assert lo < 55 < 61 < 70 < hi and hi - lo > 15
    lo, hi = seed_mean_ci([60.0, 60.5, 59.5, 60.0])
    assert 59.5 <= lo < 60 < hi <= 60.5
    assert all(math.isnan(x) for x in seed_mean_ci([60.0]))


# -- the paired t over seeds, the bootstrap p and Holm (issue 40): values by hand -------------------
def test_t_quantiles_and_p_values_match_the_tables():
    """Printed t tables: t_.975 = 12.706 (df 1), 4.303 (2), 2.776 (4), 2.365 (7); t = 1 with df 1 is a
    Cauchy, P(|T| >= 1) = 1/2; t = 2 with df 4 gives p = 0.1161."""
    from numlearn.reporting.stats import t_quantile, t_two_sided_p

    for df, want in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (7, 2.3646)):
        assert t_quantile(0.975, df) == pytest.approx(want, abs=1e-4)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5, abs=1e-12)
    assert t_two_sided_p(2.0, 4) == pytest.approx(0.11612, abs=1e-5)
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)


def test_paired_t_by_hand():
    """a - b = (2, 3, 4): mean 3, sd 1, se 1/sqrt(3); half width 4.3027 / sqrt(3) = 2.4841 -> [0.516, 5.484];
    t = 3 sqrt(3) = 5.196 on 2 df, p = 0.0351. A t on unpaired means (ignoring the pairing) or a normal
    quantile (1.96) would give other ends."""
    from numlearn.reporting.stats import paired_t

    r = paired_t([3, 5, 7], [1, 2, 3])
    assert (r.mean, r.n_seeds) == (3.0, 3)
    assert (r.ci_low, r.ci_high) == (pytest.approx(0.51586, abs=1e-4), pytest.approx(5.48414, abs=1e-4))
    assert r.p == pytest.approx(0.03510, abs=1e-4)
    one = paired_t([1.0], [0.0])
    assert math.isnan(one.ci_low) and math.isnan(one.p)
    flat = paired_t([2, 2], [1, 1])
    assert (flat.ci_low, flat.ci_high, flat.p) == (1.0, 1.0, 0.0)


def test_holm_by_hand():
    """p = (0.01, 0.04, 0.03, 0.005), m = 4: sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06,
    0.04 x 1 = 0.04 -> raised to 0.06 (monotone); Bonferroni would give 0.16 for 0.04, no correction 0.04."""
    from numlearn.reporting.stats import holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    got = holm([0.02, float("nan"), 0.01])
    assert got[0] == pytest.approx(0.02) and math.isnan(got[1]) and got[2] == pytest.approx(0.02)


def test_bootstrap_p_is_twice_the_smaller_tail():
    from numlearn.reporting.stats import bootstrap_p

    assert bootstrap_p([1, 2, 3, -1]) == pytest.approx(0.5)  # 1 of 4 at or below zero, doubled
    assert bootstrap_p([1, 2, 3, 4]) == 0.0 and bootstrap_p([-1, 1]) == 1.0


def test_ratio_bootstrap_is_a_ratio_of_sums_per_seed_and_resamples_solutions():
    from numlearn.reporting.stats import ratio_bootstrap

    # two solutions: 1 of 1 digits right, then 0 of 3. Ratio of sums 1/4 = 0.25 (the mean of ratios would be 0.5)
    num_a, den_a = np.array([[1.0, 0.0]] * 3), np.array([[1.0, 3.0]] * 3)
    num_b, den_b = np.zeros((3, 2)), np.array([[1.0, 3.0]] * 3)
    d = ratio_bootstrap((num_a, den_a), (num_b, den_b), n_boot=4000)
    assert d.delta == pytest.approx(0.25) and d.n_problems == 2 and d.paired_seeds
    # every seed is the same, so the spread is the solutions': a draw of the second solution twice gives 0, of the
    # first twice 1; the seeds-only bootstrap of the same per-seed values would give the point [0.25, 0.25]
    assert d.ci_low == pytest.approx(0.0) and d.ci_high == pytest.approx(1.0)
    # a mixed draw (half the replicates) is 1/4 as a ratio of sums, not the mean of the two ratios (1/2)
    mid = ratio_bootstrap((num_a, den_a), (num_b, den_b), n_boot=4000, level=0.4)
    assert mid.ci_low == mid.ci_high == pytest.approx(0.25)
    seeds_only = seed_bootstrap([0.25] * 3, [0.0] * 3, n_boot=4000)
    assert seeds_only.ci_low == seeds_only.ci_high == pytest.approx(0.25)
    with pytest.raises(ValueError, match="same problems"):
        ratio_bootstrap((num_a, den_a), (num_b[:, :1], den_b[:, :1]))


def test_heldout_rows_resample_solutions_only_where_every_run_stored_them():
    import pandas as pd

    from numlearn.reporting.aggregate import heldout_table

    rng = np.random.default_rng(0)

    def run(loss, seed, acc, with_examples=True):
        n = rng.integers(1, 6, size=40)
        correct = np.minimum(n, rng.binomial(n, acc))
        h = {"digit_acc": float(correct.sum() / n.sum()), "digit_nll": 0.5}
        if with_examples:
            h["by_example"] = {"n_digits": n.tolist(), "correct": correct.tolist(), "nll": (0.5 * n).tolist()}
        return {"model": "m", "loss": loss, "alpha": None, "seed": seed, "heldout": h}

    rows = [run("mle", s, 0.6) for s in range(5)] + [run("del", s, 0.7) for s in range(5)]
    _, t = heldout_table(pd.DataFrame(rows), n_boot=2000)
    acc = t[t["metric"] == "digit_acc"].iloc[0]
    assert acc["n_problems"] == 40 and np.isfinite(acc["problem_ci_low"])
    want = np.mean([r["heldout"]["digit_acc"] for r in rows[5:]]) - np.mean([r["heldout"]["digit_acc"] for r in rows[:5]])
    assert acc["delta"] == pytest.approx(want)  # the point is the runs' own scalars
    rows[0] = run("mle", 0, 0.6, with_examples=False)  # one run without them: the seeds-only bootstrap
    _, t = heldout_table(pd.DataFrame(rows), n_boot=2000)
    assert (t["n_problems"] == 0).all()
