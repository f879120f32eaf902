"""Alpha sweep table and plot from result files:
``python -m numlearn.reporting.sweep RESULTS_DIR --out results/sweep_alpha``.

Rows: loss weight alpha (MLE, if present, as alpha = 0); columns: accuracy and numerical
distance per benchmark column, mean over seeds. Writes sweep.{md,csv} and sweep.png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from .aggregate import header
from .collect import load_results


def sweep_table(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["alpha"] = df.apply(lambda r: 0.0 if r["loss"] == "mle" else float(r["alpha"]), axis=1)
    acc = df.pivot_table(index="alpha", columns="column", values="accuracy", aggfunc="mean") * 100
    acc.columns = [f"{c} acc" for c in acc.columns]
    if df["numerical_distance"].notna().any():
        dist = df.pivot_table(index="alpha", columns="column", values="numerical_distance", aggfunc="mean")
        dist.columns = [f"{c} dist" for c in dist.columns]
        acc = acc.join(dist)
    acc["seeds"] = df.groupby("alpha")["seed"].nunique()
    return acc.sort_index()


def plot(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    x = [a if a > 0 else min([v for v in table.index if v > 0] or [1e-3]) / 3 for a in table.index]
    for c in [c for c in table.columns if c.endswith(" acc")]:
        a1.plot(x, table[c], marker="o", label=c[:-4])
    for c in [c for c in table.columns if c.endswith(" dist")]:
        a2.plot(x, table[c], marker="o", label=c[:-5])
    for ax, yl in ((a1, "exact-match accuracy (%)"), (a2, "numerical distance (lower is better)")):
        ax.set_xscale("log")
        ax.set_xlabel("DEL alpha (leftmost point: MLE, alpha = 0)")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Alpha sweep table and plot.")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default=None)
    a = ap.parse_args(argv)
    try:
        df = load_results(a.results)
    except FileNotFoundError as e:
        print(f"numlearn.reporting.sweep: error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t = sweep_table(df)
    t.to_csv(out / "sweep.csv")
    md = header(a.command) + "\n\n## DEL alpha sweep (mean over seeds; alpha 0 = MLE)\n\n" + \
        t.round(3).reset_index().to_markdown(index=False) + "\n\n![alpha sweep](sweep.png)\n"
    (out / "sweep.md").write_text(md)
    plot(t, out / "sweep.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
