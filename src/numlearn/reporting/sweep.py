"""Loss-weight sweep table, plot and the validation-chosen weights, from result files:
``python -m numlearn.reporting.sweep RESULTS_DIR... --out results/sweep_alpha --select-on "synthetic_val (cot)"``.

Rows: (loss, alpha) on the effective scale (MLE, if present, as alpha = 0); per benchmark column
the accuracy's mean over seeds with a 95 % seed-bootstrap interval (each seed is one trained
model; ``numlearn.reporting.stats``). ``--select-on`` names the column the weights are chosen on
-- a validation split, never a test split (refused) -- and writes ``selected.json``: per loss, the
alpha with the highest mean accuracy there (ties: the smaller alpha). Writes sweep.{md,csv},
sweep.png (mean and seed CI per point, one line per loss) and selected.json.

A sweep runs over several sittings, so a partial one is easy to aggregate by mistake: with
``--expect del=0.01,0.1,... --min-seeds 3`` a loss's weight is chosen only once every point of
*that loss's* grid has that many seeds on the selection column (a loss's choice reads its own points
only, so a finished DEL grid need not wait for NTL's). Losses still short are named as pending, left
out of ``selected.json`` (removed when nothing is chosen) and the command exits 2; the table and plot
are still written, to show progress.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .aggregate import header
from .collect import load_results
from .stats import seed_mean_ci

TEST_MARKERS = ("test", "ood")


def unweighted(table: pd.DataFrame) -> set[str]:
    """The losses without a weight, as their results declare it: every run of theirs recorded alpha 0 (a loss
    without a numeric term refuses any other at build time, numlearn.losses.build_loss), so no name is
    special here."""
    alpha = pd.to_numeric(table["alpha"], errors="coerce").fillna(0.0)
    return {loss for loss, a in alpha.groupby(table["loss"]) if (a == 0.0).all()}


def sweep_table(df: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per (loss, alpha, column) with mean, seed CI and seed count (accuracy in %)."""
    df = df.copy()
    df["alpha"] = pd.to_numeric(df["alpha"], errors="coerce").fillna(0.0).astype(float)
    rows = []
    for (loss, alpha, col), g in df.groupby(["loss", "alpha", "column"]):
        acc = 100 * g.sort_values("seed")["accuracy"].to_numpy(dtype=float)
        lo, hi = seed_mean_ci(acc)
        dist = g["numerical_distance"].dropna().to_numpy(dtype=float)
        rows.append({"loss": loss, "alpha": alpha, "column": col, "acc": acc.mean(), "acc_ci_low": lo,
                     "acc_ci_high": hi, "dist": dist.mean() if len(dist) else np.nan, "seeds": len(acc)})
    return pd.DataFrame(rows).sort_values(["loss", "alpha", "column"]).reset_index(drop=True)


def missing_points(table: pd.DataFrame, column: str, expect: dict[str, list[float]], min_seeds: int) -> list[str]:
    """The expected (loss, alpha) points with fewer than ``min_seeds`` seeds on ``column``, as 'loss@alpha (n seeds)'."""
    sub = table[table["column"] == column]
    have = {(r.loss, float(r.alpha)): int(r.seeds) for r in sub.itertuples()}
    fixed = unweighted(table)
    out = []
    for loss, alphas in expect.items():
        for a in alphas:
            n = have.get((loss, 0.0 if loss in fixed else float(a)), 0)
            if n < min_seeds:
                out.append(f"{loss}@{a:g} ({n} seeds)")
    return out


def select(table: pd.DataFrame, column: str, expect: dict[str, list[float]] | None = None,
           min_seeds: int = 1) -> tuple[dict, dict[str, list[str]]]:
    """Per numeric loss: the alpha with the highest mean accuracy on ``column`` (a validation split).

    Returns ``(chosen, pending)``: a loss is chosen only when every point of its grid (``expect``, or
    the points present for a loss not in it) has ``min_seeds`` seeds; ``pending`` maps each other
    loss to its short points ('loss@alpha (n seeds)')."""
    if any(m in column.lower() for m in TEST_MARKERS):
        raise ValueError(f"--select-on {column!r} looks like a test split; weights are chosen on a validation split "
                         "(e.g. 'synthetic_val (cot)')")
    # no weight to choose: what the results record, and a declared grid of 0 alone
    fixed = unweighted(table) | {loss for loss, g in (expect or {}).items() if all(float(a) == 0 for a in g)}
    sub = table[(table["column"] == column) & ~table["loss"].isin(fixed)]
    if sub.empty:
        raise ValueError(f"no results on {column!r}; columns present: {sorted(set(table['column']))}")
    grids = {loss: g for loss, g in (expect or {}).items() if loss not in fixed}
    for loss in set(sub["loss"]) - set(grids):
        grids[loss] = sorted(set(sub[sub["loss"] == loss]["alpha"]))  # at least min_seeds on what is there
    chosen, pending = {}, {}
    for loss in sorted(grids):
        missing = missing_points(table, column, {loss: grids[loss]}, min_seeds)
        if missing:
            pending[loss] = missing
            continue
        g = sub[(sub["loss"] == loss) & sub["alpha"].isin([float(a) for a in grids[loss]])]
        best = g.sort_values(["acc", "alpha"], ascending=[False, True]).iloc[0]
        chosen[loss] = {"alpha": float(best["alpha"]), "accuracy": float(best["acc"]), "seeds": int(best["seeds"]),
                        "column": column, "candidates": {str(a): float(v) for a, v in zip(g["alpha"], g["acc"])}}
    return chosen, pending


def select_rate(table: pd.DataFrame, column: str, rates: dict[str, float], default: float,
                min_seeds: int) -> tuple[dict | None, list[str]]:
    """One loss's learning-rate sweep (``rates``: each row's label -> its rate): the rate with the highest mean
    accuracy on ``column`` (a validation split); ties go to the recipe's own rate ``default``, then to the lower
    rate. ``(None, pending)`` while a rate has fewer than ``min_seeds`` seeds there ('label (n seeds)')."""
    if any(m in column.lower() for m in TEST_MARKERS):
        raise ValueError(f"a learning rate is chosen on a validation split, never {column!r}")
    sub = table[table["column"] == column]
    pending, cands = [], []
    for label, lr in rates.items():
        g = sub[sub["loss"] == label]
        n = int(g["seeds"].iloc[0]) if len(g) else 0
        if n < min_seeds:
            pending.append(f"{label} ({n} seeds)")
        else:
            cands.append((float(g["acc"].iloc[0]), float(lr), label, n))
    if pending:
        return None, pending
    acc, lr, label, n = max(cands, key=lambda c: (c[0], c[1] == float(default), -c[1]))
    return {"label": label, "learning_rate": lr, "accuracy": acc, "seeds": n, "column": column,
            "default": float(default), "candidates": {f"{c[1]:g}": c[0] for c in sorted(cands, key=lambda c: c[1])}}, []


def plot(table: pd.DataFrame, path: Path) -> None:
    # the object API, not pyplot: no global backend switch (a notebook calling this keeps its own)
    from matplotlib.figure import Figure

    cols = sorted(set(table["column"]))
    fig = Figure(figsize=(5 * len(cols), 4))
    axes = fig.subplots(1, len(cols), squeeze=False)
    for ax, col in zip(axes[0], cols):
        sub = table[table["column"] == col]
        fixed = unweighted(table)
        for loss, g in sub[~sub["loss"].isin(fixed)].groupby("loss"):
            err = np.vstack([g["acc"] - g["acc_ci_low"], g["acc_ci_high"] - g["acc"]])
            ax.errorbar(g["alpha"], g["acc"], yerr=np.nan_to_num(err), marker="o", capsize=3, label=loss)
        for i, (loss, g) in enumerate(sub[sub["loss"].isin(fixed)].groupby("loss")):  # a weightless loss: a line
            m, shade = g.iloc[0], ("k", "0.4", "0.6")[i % 3]
            ax.axhline(m["acc"], color=shade, lw=1, label=f"{loss} ({int(m['seeds'])} seeds)")
            if np.isfinite(m["acc_ci_low"]):
                ax.axhspan(m["acc_ci_low"], m["acc_ci_high"], color=shade, alpha=0.1)
        ax.set_xscale("log")
        ax.set_xlabel("loss weight (effective scale)")
        ax.set_ylabel("exact-match accuracy (%), mean and 95% seed CI")
        ax.set_title(col)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Loss-weight sweep table, plot and validation-chosen weights.")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default=None)
    ap.add_argument("--select-on", default=None, help="validation column to choose each loss's weight on")
    ap.add_argument("--expect", action="append", default=[], metavar="LOSS=A,B,...",
                    help="a loss's grid; every point must be there before a weight is chosen (repeatable)")
    ap.add_argument("--min-seeds", type=int, default=1, help="seeds every point needs before a weight is chosen")
    ap.add_argument("--heading", default="Loss-weight sweep (accuracy %, mean over seeds [95% seed-bootstrap CI]; "
                    "alpha on the effective scale, 0 = MLE)", help="the table's heading")
    ap.add_argument("--no-plot", action="store_true", help="no sweep.png (rows that are not points of a weight)")
    ap.add_argument("--recipe-may-differ-in", default="", metavar="KEY,...",
                    help="recipe keys the runs may differ in (train.learning_rate: a learning-rate sweep)")
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    try:
        from numlearn.provenance import check_output_dir

        check_output_dir(a.out, "--out")
        expect = parse_expect(a.expect)
        df = load_results(a.results, recipe_may_differ_in=tuple(k for k in a.recipe_may_differ_in.split(",") if k))
        t = sweep_table(df)
    except (OSError, ValueError) as e:  # FileNotFoundError, a full disk, ...: one line
        print(f"numlearn.reporting.sweep: error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen, refused = {}, None
    if a.select_on:
        try:
            chosen, pending = select(t, a.select_on, expect, a.min_seeds)
        except ValueError as e:
            refused = str(e)
        else:
            if pending:
                refused = (f"the sweep is not finished for {', '.join(pending)}: point(s) with fewer than "
                           f"{a.min_seeds} seeds on {a.select_on!r}: "
                           f"{', '.join(p for ps in pending.values() for p in ps)}; run the rest (make sweep-alpha "
                           "resumes) before those weights are chosen")
        if not chosen:
            (out / "selected.json").unlink(missing_ok=True)  # never leave a choice from an earlier, other sweep
    t.to_csv(out / "sweep.csv", index=False)
    show = t.copy()
    show["accuracy (%)"] = show.apply(lambda r: f"{r['acc']:.1f}" + (
        f" [{r['acc_ci_low']:.1f}, {r['acc_ci_high']:.1f}]" if np.isfinite(r["acc_ci_low"]) else ""), axis=1)
    wide = show.pivot_table(index=["loss", "alpha", "seeds"], columns="column", values="accuracy (%)", aggfunc="first")
    md = [header(a.command, "numlearn.reporting.sweep", out), "", f"## {a.heading}", "",
          wide.reset_index().to_markdown(index=False), *([] if a.no_plot else ["", "![sweep](sweep.png)"])]
    if chosen:
        (out / "selected.json").write_text(json.dumps(chosen, indent=2) + "\n")
        md += ["", f"## Weights chosen on `{a.select_on}` (highest mean accuracy; never a test split)", ""]
        md += [f"- {loss}: alpha = {c['alpha']:g} ({c['accuracy']:.1f} % over {c['seeds']} seeds)"
               for loss, c in chosen.items()]
    if refused:
        md += ["", f"## {'Not chosen yet' if chosen else 'No weight chosen'}: {refused}"]
    text = "\n".join(md) + "\n"
    (out / "sweep.md").write_text(text)
    if not a.no_plot:
        plot(t, out / "sweep.png")
    print(text)
    if refused:
        print(f"numlearn.reporting.sweep: error: {refused}", file=sys.stderr)
        return 2
    return 0


def parse_expect(specs: list[str]) -> dict[str, list[float]]:
    out = {}
    for spec in specs:
        loss, sep, grid = spec.partition("=")
        try:
            alphas = [float(x) for x in grid.split(",") if x.strip()]
        except ValueError:
            alphas = []
        if not sep or not loss.strip() or not alphas:
            raise ValueError(f"--expect {spec!r}: write LOSS=ALPHA,ALPHA,... (e.g. del=0.01,0.1,1.28)")
        out[loss.strip()] = alphas
    return out


if __name__ == "__main__":
    sys.exit(main())
