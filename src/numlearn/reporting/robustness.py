"""Which "minus MLE" differences hold, on the pre-declared primary metrics, over the study's declared family.
``python -m numlearn.reporting.robustness RESULTS... --out DIR [--family ROW/METRIC ...] [--selection-seeds 0-2]``.

For every row and primary metric this writes ``robustness.{md,csv}`` with two intervals side by side:

* the bootstrap and its two-sided p (twice the smaller tail at zero; paired seeds; 20,000 resamples): two-level
  (seeds, then problems) for accuracy and distance, and for the held-out digit metrics where every run stored its
  per-solution sums (``by_example``: seeds, then solutions); else over seeds only, one value per trained model
  (``interval`` = ``seeds only``, marked † in the table). A seeds-only bootstrap gives p = 0 whenever every seed
  moves the same way, so such a verdict rests on the t, and says so;
* the paired t over seeds: the per-seed differences ``d_s = row_s - MLE_s``, ``mean +- t_{.975,k-1} sd/sqrt(k)``,
  and its p. At small seed counts the percentile bootstrap over k seeds is too narrow (at 3 seeds it is the
  seeds' [min, max] at any level); the t-interval is not.

The study declares its headline comparisons (``--family``, from the study's definition in
``numlearn.pipeline``) before the tables are built; both p-values are Holm-adjusted over that family. A
difference is called **significant** only when it is in the family, has at least 5 seeds a side, and both
adjusted p-values are below 0.05 (so both intervals exclude zero after correction). Below 5 seeds there is
no verdict: the per-seed differences and their sign count are printed instead. Comparisons outside the
family are reported, uncorrected, as exploratory.

Rows whose weight was chosen on the validation split (*val-chosen*) are estimated only on the seeds the
selection never trained (``--selection-seeds``: the sweep's seeds are excluded for that row and for MLE),
and a weight at the edge of its grid is flagged. Nothing is recomputed from generations: this reads the
same result files as ``numlearn.reporting.aggregate``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .aggregate import (
    DISTANCE,
    HELDOUT_METRICS,
    Score,
    _row_label,
    header,
    heldout_table,
    load_table_results,
    paired_bootstrap,
)
from .stats import holm, paired_t

# (kind, name, higher is better): accuracy/distance name a table column, held-out names a run.json metric
DEFAULT_PRIMARY = (("accuracy", "synthetic_test (cot)", True), ("distance", "synthetic_test (cot)", False),
                   ("heldout", "digit_acc", True), ("heldout", "digit_nll", False))
MIN_SEEDS_FOR_VERDICT = 5  # below this: per-seed values and a sign count, no significance call
ALPHA = 0.05
HEADING = "Which 'minus MLE' differences hold"
LEVEL = 0.95  # every interval's coverage
SEEDS_ONLY = "seeds only"  # the held-out metrics' bootstrap: one value per trained model, no problem level
BASELINE = "mle"  # every comparison is a row minus this one, as in table1.md's "minus MLE" tables


def primary_metrics(benchmark: str = "synthetic_test", modes: tuple[str, ...] = ("cot",)) -> tuple:
    """The pre-declared primary metrics with ``benchmark``'s columns in place of ``synthetic_test (cot)``
    (a preset whose target task is another split: the pretrained start's ``synthetic_long3_test``): accuracy and
    distance once per generation mode in ``modes`` (a study whose primaries are CoT and PoT: ``("cot", "pot")``),
    then the held-out digit metrics."""
    bad = [m for m in modes if m not in ("cot", "pot", "paper")]
    if not modes or bad:
        raise ValueError(f"primary modes {','.join(bad) or '(none)'}: give one or more of cot, pot, paper")
    return tuple((kind, f"{benchmark} ({mode})", higher) for mode in modes
                 for kind, _, higher in DEFAULT_PRIMARY if kind != "heldout") + tuple(
        m for m in DEFAULT_PRIMARY if m[0] == "heldout")


def metric_key(kind: str, name: str) -> str:
    """A primary metric as a family entry names it: ``accuracy``, ``distance``, ``digit_acc``, ``digit_nll``."""
    return name if kind == "heldout" else kind


def _scale(kind: str, name: str) -> float:
    return HELDOUT_METRICS[name][1] if kind == "heldout" else 100.0 if kind == "accuracy" else 1.0


def _interval(df: pd.DataFrame, kind: str, name: str, n_boot: int, seed: int, level: float,
              baseline: str = BASELINE):
    """The bootstrap row (delta, ci_low, ci_high, p_boot, n_seeds...) of the one row of ``df`` that is not
    ``baseline``, minus it, in the table's units (``df``: those two rows only; labels are recomputed on it)."""
    if kind == "heldout":
        _, t = heldout_table(df, baseline=baseline, n_boot=n_boot, seed=seed, level=level, with_p=True)
        if t.empty:
            return None
        t = t[t["metric"] == name]
        if t.empty:
            return None
        r = t.iloc[0].copy()
        for c in ("delta", "ci_low", "ci_high"):
            r[c] = r[c] * HELDOUT_METRICS[name][1]
        return r
    score = Score("correct_by_id", 100.0, False) if kind == "accuracy" else DISTANCE
    # every column is bootstrapped although one is kept: the columns share one random stream (and one seed
    # draw per replicate), as in table1.md
    t = paired_bootstrap(df, baseline=baseline, n_boot=n_boot, seed=seed, score=score, level=level, with_p=True)
    if t.empty:
        return None
    t = t[t["column"] == name]
    return None if t.empty else t.iloc[0]


def _per_seed(df: pd.DataFrame, label: str, kind: str, name: str) -> pd.Series:
    """Seed -> the row's value of the metric (the table's per-seed numbers, in the table's units)."""
    g = df[df["label"] == label]
    if kind == "heldout":
        runs = g.drop_duplicates("seed")
        v = [h.get(name, np.nan) if h else np.nan for h in runs["heldout"]]
        return pd.Series(v, index=runs["seed"].astype(int), dtype=float) * _scale(kind, name)
    col = "accuracy" if kind == "accuracy" else "numerical_distance"
    g = g[g["column"] == name]
    return pd.Series(g[col].to_numpy(dtype=float), index=g["seed"].astype(int)) * _scale(kind, name)


def parse_family(entries) -> list[tuple[str, float | None, str]]:
    """``ROW[:ALPHA]/METRIC`` -> (row, alpha or None, metric): ``del_paper:0.32/accuracy``, ``mixce/digit_acc``."""
    out = []
    for e in entries or ():
        row, sep, metric = str(e).partition("/")
        head, _, alpha = row.partition(":")
        if not sep or not head or metric not in ("accuracy", "distance", *HELDOUT_METRICS):
            raise ValueError(f"family entry {e!r}: write ROW[:ALPHA]/METRIC with METRIC one of accuracy, distance, "
                             f"{', '.join(HELDOUT_METRICS)} (e.g. del_paper:0.32/accuracy)")
        out.append((head, float(alpha) if alpha else None, metric))
    return out


def _in_family(family, loss: str, alpha, metric: str) -> bool:
    return any(f_row == loss and f_metric == metric and (f_alpha is None or np.isclose(f_alpha, float(alpha or 0)))
               for f_row, f_alpha, f_metric in family)


def grid_edges(selected: dict | None) -> dict[tuple[str, float], str]:
    """(loss, chosen alpha) -> "lowest" / "highest" where the sweep chose the edge of its grid."""
    out = {}
    for loss, s in (selected or {}).items():
        grid = sorted(float(a) for a in (s.get("candidates") or {}))
        if len(grid) > 1 and float(s["alpha"]) in (grid[0], grid[-1]):
            out[(loss, float(s["alpha"]))] = "lowest" if float(s["alpha"]) == grid[0] else "highest"
    return out



def robustness(df: pd.DataFrame, primary=DEFAULT_PRIMARY, family=(), selection_seeds=(), selected=None,
               n_boot: int = 20000, family_metrics=(), baseline: str = BASELINE) -> pd.DataFrame:
    """One row per (table row, primary metric), each minus ``baseline`` (a row's loss or tag: ``mle``, or the
    tuned MLE ``mle_lr0.006``). ``family``: declared (row, alpha, metric) comparisons; ``family_metrics``: every
    other row on these metrics is in the family too (a study's rule)."""
    level = LEVEL
    df = df.copy()
    df["label"] = _row_label(df)
    if not (df["loss"] == baseline).any():
        raise ValueError(f"no {baseline!r} row to compare with (rows: {', '.join(sorted(set(df['label'])))})")
    base_label = df.loc[df["loss"] == baseline, "label"].iloc[0]
    chosen = df.groupby("label")["chosen"].first() if "chosen" in df else pd.Series(dtype=bool)
    edges = grid_edges(selected)
    rows = []
    for label, g in df[df["label"] != base_label].groupby("label", sort=False):
        loss, alpha = g["loss"].iloc[0], g["alpha"].iloc[0]
        fresh = bool(chosen.get(label, False)) and bool(selection_seeds)
        sub = df[df["label"].isin([label, base_label])]
        if fresh:  # estimated on the seeds the weight selection never trained, for the row and for MLE
            sub = sub[~sub["seed"].astype(int).isin(set(selection_seeds))]
            if sub[sub["label"] == label].empty:
                given = sorted(set(df.loc[df["label"] == label, "seed"].astype(int)))
                raise ValueError(
                    f"row {label}: every seed given ({','.join(map(str, given))}) is a seed the weight selection "
                    f"trained ({','.join(map(str, selection_seeds))}), so its verdict has no fresh seed; give seeds "
                    "beyond them (e.g. TABLE1_SEEDS=0-7 or 3-7), or leave the chosen weights out (--selected none)")
        for kind, name, higher in primary:
            b = _interval(sub, kind, name, n_boot, 0, level, baseline)
            if b is None:
                continue
            a_s, m_s = _per_seed(sub, label, kind, name), _per_seed(sub, base_label, kind, name)
            common = sorted(set(a_s.index) & set(m_s.index))
            d = a_s[common].to_numpy() - m_s[common].to_numpy()
            t = paired_t(a_s[common].to_numpy(), m_s[common].to_numpy(), level)
            better = int(np.sum(d > 0) if higher else np.sum(d < 0))
            edge = edges.get((str(loss).split("+")[0], float(alpha or 0))) if bool(chosen.get(label, False)) else None
            rows.append({"loss": label, "metric": f"{kind}: {name}", "metric_key": metric_key(kind, name),
                         "higher_is_better": higher, "seeds": ",".join(map(str, common)), "n_seeds": len(common),
                         "fresh_seeds_only": fresh, "grid_edge": edge or "",
                         "interval": SEEDS_ONLY if kind == "heldout" and not int(b.get("n_problems") or 0)
                                     else "seeds x problems",
                         "delta": b["delta"], "ci_low": b["ci_low"], "ci_high": b["ci_high"], "p_boot": b["p_boot"],
                         "t_mean": t.mean, "t_ci_low": t.ci_low, "t_ci_high": t.ci_high, "p_t": t.p,
                         "per_seed_diff": ";".join(f"{x:+.4g}" for x in d), "better_seeds": f"{better}/{len(common)}",
                         "in_family": metric_key(kind, name) in family_metrics
                                      or _in_family(family, str(loss), alpha, metric_key(kind, name))})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    for f_row, f_alpha, f_metric in family:
        if not any(_in_family([(f_row, f_alpha, f_metric)], str(r.loss_tag), r.alpha, f_metric)
                   for r in df.drop_duplicates("label").rename(columns={"loss": "loss_tag"}).itertuples()):
            raise ValueError(f"the declared family names {f_row}{':' + repr(f_alpha) if f_alpha is not None else ''}"
                             f"/{f_metric}, a row these results do not hold: fix the study's family or run the row")
    fam = out["in_family"] & (out["n_seeds"] >= MIN_SEEDS_FOR_VERDICT)
    out["holm_p_boot"], out["holm_p_t"] = np.nan, np.nan
    if fam.any():
        out.loc[fam, "holm_p_boot"] = holm(out.loc[fam, "p_boot"])
        out.loc[fam, "holm_p_t"] = holm(out.loc[fam, "p_t"])
    out["verdict"] = [_verdict(r) for r in out.itertuples()]
    return out


def _excludes_zero(lo, hi) -> bool:
    return bool(np.isfinite(lo) and np.isfinite(hi) and (lo > 0 or hi < 0))


def _verdict(r) -> str:
    if r.n_seeds < MIN_SEEDS_FOR_VERDICT:
        return f"no verdict ({r.n_seeds} seeds < {MIN_SEEDS_FOR_VERDICT}): {r.better_seeds} seeds better"
    both = _excludes_zero(r.ci_low, r.ci_high) and _excludes_zero(r.t_ci_low, r.t_ci_high)
    if not r.in_family:
        return "exploratory: both exclude 0 (uncorrected)" if both else "exploratory: not significant"
    if r.holm_p_boot < ALPHA and r.holm_p_t < ALPHA:
        return "significant" + (" (rests on the t: seeds-only bootstrap)" if r.interval == SEEDS_ONLY else "")
    return "not significant after correction" if both else "not significant"


def _heldout_interval_text(t: pd.DataFrame) -> str:
    """How the held-out rows' bootstrap was computed, as the table holds them: seeds then solutions where the runs
    stored per-solution sums, seeds only (†) where not."""
    held = t[t["metric_key"].isin(list(HELDOUT_METRICS))]
    kinds = set(held["interval"]) if not held.empty else set()
    two = "two-level (seeds, then the solutions) for the held-out digit metrics, from each run's per-solution sums"
    one = ("seeds only (†) for the held-out digit metrics, one value per trained model, whose p is 0 whenever "
           "every seed moves the same way, so their verdicts rest on the t")
    if kinds == {SEEDS_ONLY}:
        return "; " + one
    if kinds == {"seeds x problems"}:
        return "; " + two
    if kinds:
        return f"; {two} where stored, else {one.replace('for the held-out digit metrics, ', '')}"
    return ""


def _fmt(v: float) -> str:
    if not np.isfinite(v):
        return "n/a"
    return f"{v:+.1f}" if abs(v) >= 1 or v == 0 else f"{v:+.3f}"


def _p(v: float) -> str:
    return "n/a" if not np.isfinite(v) else "<0.001" if v < 0.001 else f"{v:.3f}"


def render(t: pd.DataFrame, family, selection_seeds, n_boot: int, command, out: Path, family_metrics=(),
           baseline: str = BASELINE) -> str:
    base = "MLE" if baseline == BASELINE else f"`{baseline}`"
    show = pd.DataFrame({
        "loss": [r.loss + (f" [grid edge: {r.grid_edge}]" if r.grid_edge else "") for r in t.itertuples()],
        "metric": t["metric"],
        "seeds": [f"{r.n_seeds}" + (" (fresh)" if r.fresh_seeds_only else "") for r in t.itertuples()],
        "bootstrap 95%": [f"{_fmt(r.delta)} [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
                          + (" †" if r.interval == SEEDS_ONLY else "") for r in t.itertuples()],
        "paired t 95%": [f"[{_fmt(r.t_ci_low)}, {_fmt(r.t_ci_high)}]" for r in t.itertuples()],
        "p boot / t": [f"{_p(r.p_boot)} / {_p(r.p_t)}" for r in t.itertuples()],
        "Holm p boot / t": [f"{_p(r.holm_p_boot)} / {_p(r.holm_p_t)}" if r.in_family else "not in family"
                            for r in t.itertuples()],
        f"seeds better than {base}": t["better_seeds"], "verdict": t["verdict"]})
    fam = ", ".join([*(f"every row on {m}" for m in family_metrics),
                     *(f"{r}{':' + repr(a) if a is not None else ''}/{m}" for r, a, m in family)]) or "none declared"
    n_fam = int(t["in_family"].sum())
    small = t[t["n_seeds"] < MIN_SEEDS_FOR_VERDICT]
    lines = [header(command, "numlearn.reporting.robustness", out), "",
             f"## {HEADING.replace('MLE', base)}", "",
             f"Two intervals per difference: the bootstrap (paired seeds; {n_boot} resamples) -- two-level, seeds "
             f"then problems, for accuracy and distance{_heldout_interval_text(t)} "
             "-- and the paired t over the per-seed differences, each with its two-sided p. The declared "
             f"family ({n_fam} comparisons: {fam}) is Holm-adjusted, both p-values; **significant** = in "
             f"the family, >= {MIN_SEEDS_FOR_VERDICT} seeds, both adjusted p < {ALPHA}. Outside the family: "
             f"exploratory, uncorrected. Below {MIN_SEEDS_FOR_VERDICT} seeds: no verdict."
             + (f" Val-chosen rows (fresh): estimated on the seeds the weight selection never trained (selection "
                f"seeds {','.join(map(str, selection_seeds))} left out, for the row and for {base})."
                if selection_seeds else ""), "",
             show.to_markdown(index=False)]
    if not small.empty:
        lines += ["", "### Per-seed differences (rows below the verdict's seed count)", "",
                  pd.DataFrame({"loss": small["loss"], "metric": small["metric"], "seeds": small["seeds"],
                                f"row minus {base}, per seed": small["per_seed_diff"],
                                "better": small["better_seeds"]}).to_markdown(index=False)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Which 'minus MLE' differences hold: bootstrap and paired t, Holm over "
                                             "the declared family.")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default=None)
    ap.add_argument("--selected", default=None, help="the sweep's selected.json (labels val-chosen rows)")
    ap.add_argument("--exclude-benchmarks", default="")
    ap.add_argument("--big-boot", type=int, default=20000, help="bootstrap resamples")
    ap.add_argument("--family", action="append", default=[], metavar="ROW[:ALPHA]/METRIC",
                    help="a declared headline comparison (Holm-adjusted with the others)")
    ap.add_argument("--family-metrics", default="", metavar="M,M",
                    help="every row minus MLE on these primary metrics is in the family (accuracy,digit_acc)")
    ap.add_argument("--selection-seeds", default="", help="the seeds the weight selection trained (e.g. 0,1,2): "
                                                          "left out of the val-chosen rows' estimates")
    ap.add_argument("--primary-benchmark", default="synthetic_test",
                    help="the benchmark whose CoT accuracy and distance are primary (the held-out digit metrics are too)")
    ap.add_argument("--recipe-may-differ-in", default="", metavar="KEY,...",
                    help="recipe keys the rows may differ in (train.learning_rate: the tuned MLE's)")
    ap.add_argument("--primary-modes", default="cot", metavar="MODE,...",
                    help="the generation modes whose accuracy and distance on the primary benchmark are primary "
                         "(default cot; a study of CoT and PoT: cot,pot)")
    ap.add_argument("--baseline", default=BASELINE, help="the row every other is compared with: a loss or a loss "
                                                         "config's tag (default mle; the tuned MLE: mle_lr0.006)")
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    try:
        from numlearn.provenance import check_output_dir

        check_output_dir(a.out, "--out")
        family = parse_family(a.family)
        sel_seeds = [int(x) for x in a.selection_seeds.split(",") if x.strip()]
        df, _ = load_table_results(a.results, exclude_benchmarks=[b for b in a.exclude_benchmarks.split(",") if b],
                                   recipe_may_differ_in=tuple(k for k in a.recipe_may_differ_in.split(",") if k),
                                   selected=a.selected)
        selected = json.loads(Path(a.selected).read_text()) if a.selected and Path(a.selected).is_file() else None
        fam_metrics = [m for m in a.family_metrics.split(",") if m]
        if bad := [m for m in fam_metrics if m not in ("accuracy", "distance", *HELDOUT_METRICS)]:
            raise ValueError(f"--family-metrics {','.join(bad)}: choose among accuracy, distance, "
                             f"{', '.join(HELDOUT_METRICS)}")
        primary = primary_metrics(a.primary_benchmark, tuple(m for m in a.primary_modes.split(",") if m))
        t = robustness(df, primary=primary, family=family, selection_seeds=sel_seeds, selected=selected,
                       n_boot=a.big_boot, family_metrics=fam_metrics, baseline=a.baseline)
    except (OSError, ValueError) as e:  # FileNotFoundError, a full disk, a bad family entry: one line
        print(f"numlearn.reporting.robustness: error: {e}", file=sys.stderr)
        return 2
    if t.empty:
        print("numlearn.reporting.robustness: error: no primary metric found in the results", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t.to_csv(out / "robustness.csv", index=False)
    text = render(t, family, sel_seeds, a.big_boot, a.command, out, fam_metrics, a.baseline)
    (out / "robustness.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
