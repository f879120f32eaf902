"""How firm is each "minus MLE" call on the pre-declared primary metrics?
``python -m numlearn.reporting.robustness RESULTS... --out results/table1_tiny [--selected ...]``.

The table's intervals come from one bootstrap (2,000 resamples, RNG seed 0) at 95 %, one metric at a
time. A call whose interval ends near zero can flip with another RNG seed, and four primary metrics
per row give four chances of a false positive. For every row and primary metric this writes
``robustness.{md,csv}``:

* the table's interval, and the lowest lower / highest upper end over ``--boot-seeds`` bootstraps of
  the same size (Monte Carlo noise of the interval itself);
* the interval at the same level from ``--big-boot`` resamples;
* a Bonferroni interval at level ``1 - 0.05 / m`` (m = number of primary metrics) from ``--big-boot``;
* the per-seed sign: on how many paired training seeds the loss is better than MLE.

The verdict column reads "firm" (significant in every check), "not significant" (in none), or
"fragile" (the checks disagree). Nothing is recomputed from generations: this reads the same result
files as ``numlearn.reporting.aggregate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .aggregate import (
    HELDOUT_METRICS,
    _row_label,
    header,
    heldout_table,
    load_table_results,
    paired_bootstrap,
)

# (kind, name, higher is better): accuracy/distance name a table column, held-out names a run.json metric
DEFAULT_PRIMARY = (("accuracy", "synthetic_test (cot)", True), ("distance", "synthetic_test (cot)", False),
                   ("heldout", "digit_acc", True), ("heldout", "digit_nll", False))


def primary_metrics(benchmark: str = "synthetic_test") -> tuple:
    """The pre-declared primary metrics with ``benchmark``'s CoT column in place of ``synthetic_test``'s
    (a preset whose target task is another split: the pretrained start's ``synthetic_long3_test``)."""
    return tuple((kind, name.replace("synthetic_test (", f"{benchmark} (") if kind != "heldout" else name, higher)
                 for kind, name, higher in DEFAULT_PRIMARY)


def _intervals(df: pd.DataFrame, kind: str, name: str, n_boot: int, seed: int, level: float) -> pd.DataFrame:
    """Rows (loss label, delta, ci_low, ci_high, significant, n_seeds...) for one metric, in the table's units."""
    if kind == "heldout":
        _, t = heldout_table(df, n_boot=n_boot, seed=seed, level=level)
        if t.empty:
            return t
        t = t[t["metric"] == name].copy()
        for c in ("delta", "ci_low", "ci_high"):
            t[c] = t[c] * HELDOUT_METRICS[name][1]
        return t
    field, scale = ("correct_by_id", 100.0) if kind == "accuracy" else ("distance_by_id", 1.0)
    # every column is bootstrapped although one is kept: the columns share one random stream (and one
    # seed draw per replicate), so one column alone would not give table1.md's interval at RNG seed 0
    t = paired_bootstrap(df, n_boot=n_boot, seed=seed, field=field, scale=scale, with_macc=False, level=level)
    return t[t["column"] == name] if not t.empty else t


def _per_seed(df: pd.DataFrame, kind: str, name: str) -> dict[str, pd.Series]:
    """label -> per-seed value of the metric (the table's per-seed numbers)."""
    out = {}
    for label, g in df.groupby("label"):
        if kind == "heldout":
            runs = g.drop_duplicates("seed")
            out[label] = pd.Series([h.get(name, np.nan) if h else np.nan for h in runs["heldout"]],
                                   index=runs["seed"].astype(int), dtype=float)
        else:
            col = "accuracy" if kind == "accuracy" else "numerical_distance"
            g = g[g["column"] == name]
            out[label] = pd.Series(g[col].to_numpy(dtype=float), index=g["seed"].astype(int))
    return out


def robustness(df: pd.DataFrame, primary=DEFAULT_PRIMARY, boot_seeds: int = 10, n_boot: int = 2000,
               big_boot: int = 20000, level: float = 0.95, baseline: str = "mle") -> pd.DataFrame:
    df = df.copy()
    df["label"] = _row_label(df)
    m = len(primary)
    bonf = 1 - (1 - level) / m
    rows = []
    for kind, name, higher in primary:
        runs = [_intervals(df, kind, name, n_boot, s, level) for s in range(boot_seeds)]
        if runs[0].empty:
            continue
        big = _intervals(df, kind, name, big_boot, 0, level).set_index("loss")
        strict = _intervals(df, kind, name, big_boot, 0, bonf).set_index("loss")
        per_seed = _per_seed(df, kind, name)
        base_label = df.loc[df["loss"] == baseline, "label"].iloc[0]
        for r in runs[0].itertuples():
            alt = [t.set_index("loss").loc[r.loss] for t in runs]
            lows, highs = [a["ci_low"] for a in alt], [a["ci_high"] for a in alt]
            sig_each = [bool(a["significant"]) for a in alt]
            a_s, b_s = per_seed[r.loss], per_seed[base_label]
            common = sorted(set(a_s.index) & set(b_s.index))
            d = a_s[common].to_numpy() - b_s[common].to_numpy()
            better = int(np.sum(d > 0) if higher else np.sum(d < 0))
            checks = sig_each + [bool(big.loc[r.loss, "significant"]), bool(strict.loc[r.loss, "significant"])]
            verdict = "firm" if all(checks) else "not significant" if not any(checks) else "fragile"
            rows.append({"loss": r.loss, "metric": f"{kind}: {name}", "higher_is_better": higher, "delta": r.delta,
                         "ci_low": r.ci_low, "ci_high": r.ci_high, "significant": bool(r.significant),
                         "min_ci_low": min(lows), "max_ci_high": max(highs),
                         "significant_in": f"{sum(sig_each)}/{len(sig_each)}",
                         "big_ci_low": big.loc[r.loss, "ci_low"], "big_ci_high": big.loc[r.loss, "ci_high"],
                         "bonferroni_level": bonf, "bonferroni_ci_low": strict.loc[r.loss, "ci_low"],
                         "bonferroni_ci_high": strict.loc[r.loss, "ci_high"],
                         "bonferroni_significant": bool(strict.loc[r.loss, "significant"]),
                         "better_seeds": f"{better}/{len(common)}", "verdict": verdict})
    return pd.DataFrame(rows)


def _fmt(v: float) -> str:
    return f"{v:+.1f}" if abs(v) >= 1 or v == 0 else f"{v:+.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Robustness of the 'minus MLE' calls on the primary metrics.")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default=None)
    ap.add_argument("--selected", default=None, help="the sweep's selected.json (labels val-chosen rows)")
    ap.add_argument("--exclude-benchmarks", default="")
    ap.add_argument("--boot-seeds", type=int, default=10)
    ap.add_argument("--big-boot", type=int, default=20000)
    ap.add_argument("--primary-benchmark", default="synthetic_test",
                    help="the benchmark whose CoT accuracy and distance are primary (the held-out digit metrics are too)")
    a = ap.parse_args(argv)
    try:
        from numlearn.provenance import check_output_dir

        check_output_dir(a.out, "--out")
        df, _ = load_table_results(a.results, exclude_benchmarks=[b for b in a.exclude_benchmarks.split(",") if b],
                                   selected=a.selected)
        t = robustness(df, primary=primary_metrics(a.primary_benchmark), boot_seeds=a.boot_seeds, big_boot=a.big_boot)
    except (OSError, ValueError) as e:  # FileNotFoundError, a full disk, ...: one line
        print(f"numlearn.reporting.robustness: error: {e}", file=sys.stderr)
        return 2
    if t.empty:
        print("numlearn.reporting.robustness: error: no primary metric found in the results", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t.to_csv(out / "robustness.csv", index=False)
    show = pd.DataFrame({
        "loss": t["loss"], "metric": t["metric"],
        "table (95%)": [f"{_fmt(r.delta)} [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]" for r in t.itertuples()],
        f"ends over {a.boot_seeds} bootstraps": [f"[{_fmt(r.min_ci_low)}, {_fmt(r.max_ci_high)}], significant in "
                                                f"{r.significant_in}" for r in t.itertuples()],
        f"95%, {a.big_boot} resamples": [f"[{_fmt(r.big_ci_low)}, {_fmt(r.big_ci_high)}]" for r in t.itertuples()],
        "Bonferroni": [f"[{_fmt(r.bonferroni_ci_low)}, {_fmt(r.bonferroni_ci_high)}]" for r in t.itertuples()],
        "seeds better than MLE": t["better_seeds"], "verdict": t["verdict"]})
    m = t["metric"].nunique()
    text = "\n".join([
        header(a.command, "numlearn.reporting.robustness", out), "",
        f"## How firm each 'minus MLE' call is ({m} pre-declared primary metrics)", "",
        "Table: the interval in `table1.md` (2,000 resamples, bootstrap seed 0). Then the extreme ends over "
        f"{a.boot_seeds} bootstrap seeds of the same size, the 95% interval from {a.big_boot} resamples, and a "
        f"Bonferroni interval at {100 * t['bonferroni_level'].iloc[0]:.2f}% ({m} primary metrics per row) from "
        f"{a.big_boot} resamples. Seeds better: paired training seeds on which the loss beats MLE (the "
        "metric's direction). Verdict: firm = significant in every check; fragile = the checks disagree.", "",
        show.to_markdown(index=False)]) + "\n"
    (out / "robustness.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
