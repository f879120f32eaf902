"""Loss-weight sweep table, plot and the validation-chosen weights, from result files:
``python -m numlearn.reporting.sweep RESULTS_DIR... --out results/sweep_alpha --select-on "synthetic_val (cot)"``.

Rows: (loss, alpha) on the effective scale (MLE, if present, as alpha = 0); per benchmark column
the accuracy's mean over seeds with a 95 % seed-bootstrap interval (each seed is one trained
model; ``numlearn.reporting.stats``). ``--select-on`` names the column the weights are chosen on
-- a validation split, never a test split (refused) -- and writes ``selected.json``: per loss, the
alpha with the highest mean accuracy there (ties: the smaller alpha). Writes sweep.{md,csv},
sweep.png (mean and seed CI per point, one line per loss) and selected.json.
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


def sweep_table(df: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per (loss, alpha, column) with mean, seed CI and seed count (accuracy in %)."""
    df = df.copy()
    df["alpha"] = df.apply(lambda r: 0.0 if r["loss"] == "mle" else float(r["alpha"]), axis=1)
    rows = []
    for (loss, alpha, col), g in df.groupby(["loss", "alpha", "column"]):
        acc = 100 * g.sort_values("seed")["accuracy"].to_numpy(dtype=float)
        lo, hi = seed_mean_ci(acc)
        dist = g["numerical_distance"].dropna().to_numpy(dtype=float)
        rows.append({"loss": loss, "alpha": alpha, "column": col, "acc": acc.mean(), "acc_ci_low": lo,
                     "acc_ci_high": hi, "dist": dist.mean() if len(dist) else np.nan, "seeds": len(acc)})
    return pd.DataFrame(rows).sort_values(["loss", "alpha", "column"]).reset_index(drop=True)


def select(table: pd.DataFrame, column: str) -> dict:
    """Per numeric loss: the alpha with the highest mean accuracy on ``column`` (a validation split)."""
    if any(m in column.lower() for m in TEST_MARKERS):
        raise ValueError(f"--select-on {column!r} looks like a test split; weights are chosen on a validation split "
                         "(e.g. 'synthetic_val (cot)')")
    sub = table[(table["column"] == column) & (table["loss"] != "mle")]
    if sub.empty:
        raise ValueError(f"no results on {column!r}; columns present: {sorted(set(table['column']))}")
    out = {}
    for loss, g in sub.groupby("loss"):
        best = g.sort_values(["acc", "alpha"], ascending=[False, True]).iloc[0]
        out[loss] = {"alpha": float(best["alpha"]), "accuracy": float(best["acc"]), "seeds": int(best["seeds"]),
                     "column": column, "candidates": {str(a): float(v) for a, v in zip(g["alpha"], g["acc"])}}
    return out


def plot(table: pd.DataFrame, path: Path) -> None:
    # the object API, not pyplot: no global backend switch (a notebook calling this keeps its own)
    from matplotlib.figure import Figure

    cols = sorted(set(table["column"]))
    fig = Figure(figsize=(5 * len(cols), 4))
    axes = fig.subplots(1, len(cols), squeeze=False)
    for ax, col in zip(axes[0], cols):
        sub = table[table["column"] == col]
        mle = sub[sub["loss"] == "mle"]
        for loss, g in sub[sub["loss"] != "mle"].groupby("loss"):
            err = np.vstack([g["acc"] - g["acc_ci_low"], g["acc_ci_high"] - g["acc"]])
            ax.errorbar(g["alpha"], g["acc"], yerr=np.nan_to_num(err), marker="o", capsize=3, label=loss)
        if not mle.empty:
            m = mle.iloc[0]
            ax.axhline(m["acc"], color="k", lw=1, label=f"mle ({int(m['seeds'])} seeds)")
            if np.isfinite(m["acc_ci_low"]):
                ax.axhspan(m["acc_ci_low"], m["acc_ci_high"], color="k", alpha=0.1)
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
    a = ap.parse_args(argv)
    try:
        df = load_results(a.results)
        t = sweep_table(df)
        chosen = select(t, a.select_on) if a.select_on else None
    except (FileNotFoundError, ValueError) as e:
        print(f"numlearn.reporting.sweep: error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t.to_csv(out / "sweep.csv", index=False)
    show = t.copy()
    show["accuracy (%)"] = show.apply(lambda r: f"{r['acc']:.1f}" + (
        f" [{r['acc_ci_low']:.1f}, {r['acc_ci_high']:.1f}]" if np.isfinite(r["acc_ci_low"]) else ""), axis=1)
    wide = show.pivot_table(index=["loss", "alpha", "seeds"], columns="column", values="accuracy (%)", aggfunc="first")
    md = [header(a.command), "", "## Loss-weight sweep (accuracy %, mean over seeds [95% seed-bootstrap CI]; "
          "alpha on the effective scale, 0 = MLE)", "", wide.reset_index().to_markdown(index=False), "",
          "![sweep](sweep.png)"]
    if chosen:
        (out / "selected.json").write_text(json.dumps(chosen, indent=2) + "\n")
        md += ["", f"## Weights chosen on `{a.select_on}` (highest mean accuracy; never a test split)", ""]
        md += [f"- {loss}: alpha = {c['alpha']:g} ({c['accuracy']:.1f} % over {c['seeds']} seeds)"
               for loss, c in chosen.items()]
    text = "\n".join(md) + "\n"
    (out / "sweep.md").write_text(text)
    plot(t, out / "sweep.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
