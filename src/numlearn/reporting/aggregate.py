"""Table 1 from result files: ``python -m numlearn.reporting.aggregate RESULTS_DIR... --out DIR``.

Writes ``table1.{md,csv,tex}`` (rows model x loss, columns the benchmarks and mACC: accuracy in
%, mean +- std over seeds), ``distance.{md,csv}`` (numerical distance), ``digits.{md,csv}``
(per-digit-position accuracy) and, with an MLE row, ``vs_mle.{md,csv}``: each loss minus MLE
with a paired bootstrap 95 % CI over problems. The paper's own numbers are added to the Markdown
table as separate, labelled reference rows, never mixed with ours.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from .collect import load_results
from .paper import PAPER_MACC

LOSS_ORDER = ["mle", "mixce", "emo", "ntl", "dist2", "del"]
MACC = "mACC"


def _loss_key(loss: str) -> int:
    return LOSS_ORDER.index(loss) if loss in LOSS_ORDER else len(LOSS_ORDER)


def _row_label(df: pd.DataFrame) -> pd.Series:
    multi_alpha = df.groupby(["model", "loss"])["alpha"].nunique() > 1
    def lab(r):
        if multi_alpha.get((r["model"], r["loss"]), False):
            return f"{r['loss']} (alpha={r['alpha']})"
        return r["loss"]
    return df.apply(lab, axis=1)


def accuracy_table(df: pd.DataFrame, value: str = "accuracy", scale: float = 100.0,
                   with_macc: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(mean, std) tables: index (model, loss label), columns benchmarks (+ mACC)."""
    df = df.copy()
    df["label"] = _row_label(df)
    cols = list(dict.fromkeys(df.sort_values(["benchmark", "mode"])["column"]))
    per_seed = df.pivot_table(index=["model", "label", "seed"], columns="column", values=value, aggfunc="first")
    per_seed = per_seed.reindex(columns=cols) * scale
    if with_macc:
        per_seed[MACC] = per_seed[cols].mean(axis=1, skipna=False)
        cols = cols + [MACC]
    g = per_seed.groupby(level=["model", "label"])
    mean, std = g.mean(), g.std(ddof=1)
    order = sorted(mean.index, key=lambda ix: (ix[0], _loss_key(ix[1].split(" ")[0]), ix[1]))
    return mean.loc[order, cols], std.reindex(index=order, columns=cols), cols


def _fmt(m, s, digits=1) -> str:
    if m is None or (isinstance(m, float) and np.isnan(m)):
        return "-"
    if s is None or (isinstance(s, float) and np.isnan(s)):
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def n_seeds(df: pd.DataFrame) -> pd.Series:
    df = df.copy()
    df["label"] = _row_label(df)
    return df.groupby(["model", "label"])["seed"].nunique()


def to_markdown(mean, std, cols, seeds: pd.Series, digits=1, reference_rows: list[dict] | None = None) -> str:
    head = "| model | loss | seeds | " + " | ".join(cols) + " |"
    sep = "|---|---|---|" + "---|" * len(cols)
    lines = [head, sep]
    for (model, label), row in mean.iterrows():
        cells = [_fmt(row[c], std.loc[(model, label), c], digits) for c in cols]
        lines.append(f"| {model} | {label} | {int(seeds.get((model, label), 1))} | " + " | ".join(cells) + " |")
    for ref in reference_rows or []:
        cells = [f"*{ref[c]:.1f}*" if c in ref else "" for c in cols]
        lines.append(f"| *paper: {ref['model']}* | *{ref['loss']}* | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_latex(mean, std, cols, digits=1) -> str:
    spec = "ll" + "r" * len(cols)
    out = [f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
           "Model & Loss & " + " & ".join(c.replace("_", "\\_") for c in cols) + " \\\\", "\\midrule"]
    for (model, label), row in mean.iterrows():
        cells = [_fmt(row[c], std.loc[(model, label), c], digits).replace("±", "$\\pm$") for c in cols]
        out.append(f"{model} & {label} & " + " & ".join(cells) + " \\\\")
    out += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(out)


def digit_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per-digit-position accuracy (%), mean over seeds, rows model x loss x column."""
    rows = []
    df = df.copy()
    df["label"] = _row_label(df)
    for _, r in df.iterrows():
        for part, d in (("int", r["digit_acc_int"]), ("frac", r["digit_acc_frac"])):
            for k, v in d.items():
                name = f"int[10^{k}]" if part == "int" else f"frac[10^-{k}]"
                rows.append({"model": r["model"], "loss": r["label"], "column": r["column"], "position": name,
                             "seed": r["seed"], "acc": 100.0 * v})
    if not rows:
        return pd.DataFrame()
    t = pd.DataFrame(rows).groupby(["model", "loss", "column", "position"])["acc"].mean().unstack("position")
    pos = sorted(t.columns, key=lambda c: (c.startswith("frac"), abs(int(c.split("^")[1].rstrip("]")))))
    return t[pos].round(1)


def paired_bootstrap(df: pd.DataFrame, baseline: str = "mle", n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Each loss minus ``baseline`` on the same problems: per column and for mACC (mean of the
    column differences), problems resampled with replacement within each column; per-problem
    correctness is averaged over the seeds each loss has."""
    rng = np.random.default_rng(seed)
    df = df.copy()
    df["label"] = _row_label(df)
    out = []
    for model, dm in df.groupby("model"):
        base = dm[dm["loss"] == baseline]
        if base.empty:
            continue
        cols = sorted(set(dm["column"]))
        def per_problem(sub, col):
            vecs = [pd.Series(r["correct_by_id"], dtype=float) for _, r in sub[sub["column"] == col].iterrows()]
            return pd.concat(vecs, axis=1).mean(axis=1) if vecs else None
        for label, dl in dm.groupby("label"):
            if label == baseline:
                continue
            diffs_boot, point = [], []
            rows_col = []
            for col in cols:
                a, b = per_problem(dl, col), per_problem(base, col)
                if a is None or b is None:
                    continue
                ids = sorted(set(a.index) & set(b.index))
                if not ids:
                    continue
                d = (a[ids] - b[ids]).to_numpy()
                idx = rng.integers(0, len(d), size=(n_boot, len(d)))
                boot = d[idx].mean(axis=1)
                diffs_boot.append(boot)
                point.append(d.mean())
                lo, hi = np.percentile(boot, [2.5, 97.5])
                rows_col.append({"model": model, "loss": label, "column": col, "delta": 100 * d.mean(),
                                 "ci_low": 100 * lo, "ci_high": 100 * hi, "n_problems": len(ids)})
            if diffs_boot:
                boot = np.mean(diffs_boot, axis=0)
                lo, hi = np.percentile(boot, [2.5, 97.5])
                rows_col.append({"model": model, "loss": label, "column": MACC, "delta": 100 * float(np.mean(point)),
                                 "ci_low": 100 * lo, "ci_high": 100 * hi,
                                 "n_problems": int(sum(r["n_problems"] for r in rows_col))})
            out.extend(rows_col)
    return pd.DataFrame(out)


def header(command: str | None) -> str:
    from numlearn.provenance import environment, git_info

    g = git_info()
    env = environment()
    return "\n".join([
        "<!-- generated by numlearn.reporting.aggregate; do not edit by hand -->",
        f"- command: `{command or ' '.join(shlex.quote(a) for a in sys.argv)}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- git: {g['commit']}{' (dirty)' if g['dirty'] else ''}",
        f"- machine: {platform.platform()}, {env.get('cpu_count')} CPUs, device {env.get('device')}",
    ])


def aggregate(paths, out_dir, command: str | None = None, reference: bool = True, n_boot: int = 2000,
              protocol: str | None = None, skip_bad: bool = False) -> dict:
    skipped: list[str] = []
    df = load_results(paths, protocol, skip_bad, skipped)
    for f in skipped:
        print(f"numlearn.reporting.aggregate: skipped unreadable {f}", file=sys.stderr)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = n_seeds(df)
    mean, std, cols = accuracy_table(df)
    ref_rows = []
    if reference:
        ref_rows = [{"model": m, "loss": loss, MACC: v} for (m, loss), v in PAPER_MACC.items()]
    md = [header(command), f"- evaluation protocol: {df['protocol'].iloc[0]}"
          + (f"; {len(skipped)} unreadable result file(s) skipped" if skipped else ""), "", "## Accuracy (%)", "",
          "mean ± std over seeds; mACC = unweighted mean over the columns. Rows in *italics* are the paper's "
          "reported mACC over its seven benchmarks (authors' README), not comparable cell by cell.", "",
          to_markdown(mean, std, cols, seeds, 1, ref_rows)]
    flat = mean.copy()
    flat.columns = [f"{c} acc" for c in flat.columns]
    sflat = std.copy()
    sflat.columns = [f"{c} acc_std" for c in sflat.columns]
    dmean, dstd, dcols = accuracy_table(df[df["numerical_distance"].notna()], "numerical_distance", 1.0, with_macc=False) \
        if df["numerical_distance"].notna().any() else (None, None, [])
    if dmean is not None:
        md += ["", "## Numerical distance (mean |slog(pred) - slog(truth)|, lower is better)", "",
               to_markdown(dmean, dstd, dcols, seeds, 3)]
        dflat = dmean.copy()
        dflat.columns = [f"{c} dist" for c in dflat.columns]
        flat = flat.join(dflat)
    pd.concat([flat, sflat], axis=1).to_csv(out / "table1.csv")
    (out / "table1.tex").write_text(to_latex(mean, std, cols) + "\n")
    dig = digit_table(df)
    if not dig.empty:
        dig.to_csv(out / "digits.csv")
        md += ["", "## Per-digit-position accuracy (%, mean over seeds)", "", dig.reset_index().to_markdown(index=False)]
    boot = paired_bootstrap(df, n_boot=n_boot)
    if not boot.empty:
        boot.to_csv(out / "vs_mle.csv", index=False)
        b = boot.copy()
        b["delta (95% CI)"] = b.apply(lambda r: f"{r['delta']:+.1f} [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]", axis=1)
        piv = b.pivot_table(index=["model", "loss"], columns="column", values="delta (95% CI)", aggfunc="first")
        md += ["", "## Each loss minus MLE, accuracy points (paired bootstrap 95% CI over problems)", "",
               piv.reset_index().to_markdown(index=False)]
    text = "\n".join(md) + "\n"
    (out / "table1.md").write_text(text)
    summary = {"n_results": len(df), "protocol": df["protocol"].iloc[0], "columns": cols, "rows": [list(ix) for ix in mean.index],
               "macc": {f"{m}/{lab}": float(v) for (m, lab), v in mean[MACC].items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return {"markdown": text, "mean": mean, "std": std, "bootstrap": boot, "digits": dig}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Aggregate result.json files into Table 1.")
    ap.add_argument("results", nargs="+", help="result.json files or directories searched recursively")
    ap.add_argument("--out", required=True, help="output directory (e.g. results/table1_tiny)")
    ap.add_argument("--command", default=None, help="the command recorded in the header")
    ap.add_argument("--no-reference", action="store_true", help="omit the paper's reference rows")
    ap.add_argument("--wandb", action="store_true", help="also log the tables to W&B (offline without a key)")
    ap.add_argument("--protocol", choices=("strict", "official"), default=None,
                    help="evaluation protocol of the table (default: the one protocol the results share)")
    ap.add_argument("--skip-bad", action="store_true", help="leave out unreadable result files (named on stderr)")
    a = ap.parse_args(argv)
    try:
        res = aggregate(a.results, a.out, a.command, reference=not a.no_reference, protocol=a.protocol,
                        skip_bad=a.skip_bad)
    except (FileNotFoundError, ValueError) as e:
        print(f"numlearn.reporting.aggregate: error: {e}", file=sys.stderr)
        return 2
    print(res["markdown"])
    if a.wandb:
        from numlearn.tracking import log_tables

        log_tables(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
