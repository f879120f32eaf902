"""Table 1 from result files: ``python -m numlearn.reporting.aggregate RESULTS_DIR... --out DIR``.

Writes ``table1.{md,csv,tex}`` (rows model x loss, columns the benchmarks and mACC: accuracy in
%, mean +- std over seeds), ``distance.{md,csv}`` (numerical distance), ``digits.{md,csv}``
(per-digit-position accuracy) and, with an MLE row, ``vs_mle.{md,csv}``: each loss minus MLE
with a seed-aware 95 % CI (seeds and problems resampled; ``numlearn.reporting.stats``) and the
problem-only CI as a secondary column; the held-out teacher-forced digit metrics of each run and
their differences (``heldout_vs_mle.csv``). The paper's own numbers are added to the Markdown
table as separate, labelled reference rows, never mixed with ours.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from .collect import load_results
from .paper import PAPER_MACC
from .stats import MIN_SEEDS_FOR_SIGNIFICANCE, multi_column_bootstrap, ratio_bootstrap, seed_bootstrap

LOSS_ORDER = ["mle", "mixce", "emo", "ntl", "dist2", "del"]
MACC = "mACC"

log = logging.getLogger(__name__)


def _loss_key(loss: str) -> int:
    return LOSS_ORDER.index(loss) if loss in LOSS_ORDER else len(LOSS_ORDER)


def _row_label(df: pd.DataFrame) -> pd.Series:
    multi_alpha = df.groupby(["model", "loss"])["alpha"].nunique() > 1
    chosen = df["chosen"] if "chosen" in df else pd.Series(False, index=df.index)
    def lab(r):
        if chosen[r.name]:
            return f"{r['loss']} (alpha={r['alpha']}, val-chosen)"
        if multi_alpha.get((r["model"], r["loss"]), False):
            return f"{r['loss']} (alpha={r['alpha']})"
        return r["loss"]
    return df.apply(lab, axis=1)


def mark_selected(df: pd.DataFrame, selected: dict) -> pd.DataFrame:
    """Flag the rows whose (loss, alpha) is a validation-chosen weight (``numlearn.reporting.sweep``'s
    ``selected.json``: loss -> {"alpha": ...}), so every table labels them 'val-chosen'."""
    try:
        want = {loss: float(c["alpha"]) for loss, c in selected.items()}
    except (AttributeError, KeyError, TypeError, ValueError):
        raise ValueError("--selected: expected the sweep's selected.json, {loss: {\"alpha\": ..., ...}}; "
                         "write it with `make sweep-report`") from None
    df = df.copy()
    df["chosen"] = [loss in want and float(a) == want[loss] for loss, a in zip(df["loss"], df["alpha"])]
    absent = [f"{loss} alpha={a:g}" for loss, a in want.items()
              if not ((df["loss"] == loss) & df["chosen"]).any()]
    if absent:
        raise ValueError(f"--selected names {', '.join(absent)} but no result file has it; evaluate those runs "
                         "(make reproduce-table1 runs the chosen weights) or drop --selected")
    return df


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


def _per_seed_matrix(sub: pd.DataFrame, col: str, field: str = "correct_by_id") -> dict:
    """seed -> per-problem score (Series by problem id; NaN = not scored) of one column."""
    return {int(r["seed"]): pd.Series({k: np.nan if v is None else v for k, v in r[field].items()}, dtype=float)
            for _, r in sub[sub["column"] == col].iterrows() if r[field]}


@dataclass(frozen=True)
class Score:
    """A per-problem score the bootstrap compares: its field in the result rows, the scale to the table's
    units, and whether mACC (the mean of the column differences) is reported."""

    field: str
    scale: float
    with_macc: bool


ACCURACY = Score("correct_by_id", 100.0, True)  # percentage points
DISTANCE = Score("distance_by_id", 1.0, False)  # NaN where a prediction is not a number


def paired_bootstrap(df: pd.DataFrame, baseline: str = "mle", n_boot: int = 2000, seed: int = 0,
                     score: Score = ACCURACY, level: float = 0.95, with_p: bool = False) -> pd.DataFrame:
    """Each loss minus ``baseline``, per column and for mACC (mean of the column differences), with
    a seed-aware 95 % interval (``numlearn.reporting.stats``: seeds and problems resampled, seeds
    paired when both sides ran the same ones) and, as a secondary column, the problem-only interval.
    Only seeds evaluated on every column of a row are used; problems are those both sides scored.
    ``score``: the per-problem score (``ACCURACY``, ``DISTANCE``)."""
    field, scale = score.field, score.scale
    if field not in df:
        return pd.DataFrame()
    df = df.copy()
    df["label"] = _row_label(df)
    out = []
    for model, dm in df.groupby("model"):
        base = dm[dm["loss"] == baseline]
        if base.empty:
            continue
        base_label = base["label"].iloc[0]
        for label, dl in dm.groupby("label"):
            if label == base_label:
                continue
            cols = sorted(set(dl["column"]) & set(base["column"]))
            per_a = {c: _per_seed_matrix(dl, c, field) for c in cols}
            per_b = {c: _per_seed_matrix(base, c, field) for c in cols}
            cols = [c for c in cols if per_a[c] and per_b[c]]
            if not cols:
                continue
            seeds_a = sorted(set.intersection(*(set(per_a[c]) for c in cols)))
            seeds_b = sorted(set.intersection(*(set(per_b[c]) for c in cols)))
            if not seeds_a or not seeds_b:
                continue
            mats_a, mats_b, kept = [], [], []
            for c in cols:
                ids = sorted(set.intersection(*(set(per_a[c][s].index) for s in seeds_a),
                                              *(set(per_b[c][s].index) for s in seeds_b)))
                if not ids:
                    continue
                mats_a.append(np.stack([per_a[c][s][ids].to_numpy() for s in seeds_a]))
                mats_b.append(np.stack([per_b[c][s][ids].to_numpy() for s in seeds_b]))
                kept.append(c)
            if not kept:
                continue
            diffs = multi_column_bootstrap(mats_a, mats_b, seeds_a, seeds_b, n_boot=n_boot, seed=seed, level=level)
            names = kept + ([MACC] if len(kept) > 1 else [])
            for c, d in zip(names, diffs, strict=True):
                if c == MACC and not score.with_macc:
                    continue
                r = d.as_dict(with_p)
                for k in ("delta", "ci_low", "ci_high", "problem_ci_low", "problem_ci_high"):
                    r[k] = scale * r[k]
                out.append({"model": model, "loss": label, "column": c, **r})
    return pd.DataFrame(out)


def _ci_cell(r, lo="ci_low", hi="ci_high", f=".1f") -> str:
    """"delta [low, high]", `*` when the (seed-aware) interval is significant; n/a without one, saying why: no
    difference at all (a side with no numeric prediction, so no distance), or too few seeds for an interval."""
    if not np.isfinite(r["delta"]):
        return "n/a: no numeric prediction on a side"
    if not np.isfinite(r[lo]):
        return f"{r['delta']:+{f}} [n/a: {min(r['n_seeds'], r['n_seeds_baseline'])} seed]"
    star = " *" if r.get("significant") and lo == "ci_low" else ""
    return f"{r['delta']:+{f}} [{r[lo]:+{f}}, {r[hi]:+{f}}]{star}"


def _vs_mle_pivot(boot: pd.DataFrame, cell) -> pd.DataFrame:
    """One row per (model, loss, seed counts), one ``cell(row)`` per column."""
    b = boot.copy()
    b["cell"] = b.apply(cell, axis=1)
    b["seeds"] = b.apply(lambda r: f"{r['n_seeds']} vs {r['n_seeds_baseline']}"
                         + (" (paired)" if r["paired_seeds"] else ""), axis=1)
    return b.pivot_table(index=["model", "loss", "seeds"], columns="column", values="cell", aggfunc="first")


HELDOUT_METRICS = {"digit_acc": ("held-out digit acc (%)", 100.0), "digit_nll": ("held-out digit NLL (nats)", 1.0),
                   "digit_entropy": ("held-out digit entropy (nats)", 1.0), "ce": ("held-out token CE (nats)", 1.0)}


# held-out metric -> the per-solution sums (``by_example``) whose ratio it is: numerator, denominator
_BY_EXAMPLE = {"digit_acc": ("correct", "n_digits"), "digit_nll": ("nll", "n_digits")}


def _per_problem_sums(metric: str, ex_a: list, ex_b: list):
    """``(num_a, den_a, num_b, den_b)`` ``[seeds, solutions]`` arrays for ``ratio_bootstrap`` when every run of both
    rows stored its per-solution sums (``by_example``) over the same number of solutions; None otherwise (the
    seeds-only bootstrap)."""
    if metric not in _BY_EXAMPLE or not ex_a or not ex_b or not all(ex_a) or not all(ex_b):
        return None
    num, den = _BY_EXAMPLE[metric]
    try:
        arrays = [np.array([e[key] for e in ex], dtype=float) for ex in (ex_a, ex_b) for key in (num, den)]
    except (KeyError, ValueError):  # a missing key, or runs measured on different numbers of solutions
        return None
    return tuple(arrays) if arrays[0].shape[1:] == arrays[2].shape[1:] and arrays[0].ndim == 2 else None


def heldout_table(df: pd.DataFrame, baseline: str = "mle", n_boot: int = 2000, seed: int = 0,
                  level: float = 0.95, with_p: bool = False) -> tuple[str, pd.DataFrame]:
    """Teacher-forced digit metrics on the held-out split (one value per trained model, from its
    ``run.json``): mean ± std over seeds, and each loss minus ``baseline``: the two-level bootstrap (seeds, then
    solutions) where both rows stored per-solution sums (``by_example``; ``n_problems`` > 0), else over seeds only
    (``n_problems`` 0)."""
    df = df.copy()
    df["label"] = _row_label(df)
    runs = df.drop_duplicates(["model", "label", "seed"])
    runs = runs[runs["heldout"].map(bool)]
    if runs.empty:
        return "", pd.DataFrame()
    keys = [k for k in HELDOUT_METRICS if any(k in h for h in runs["heldout"])]
    rows, lines = [], []
    head = "| model | loss | seeds | " + " | ".join(HELDOUT_METRICS[k][0] for k in keys) + " |"
    lines += [head, "|---|---|---|" + "---|" * len(keys)]
    order = sorted(set(zip(runs["model"], runs["label"], strict=True)),
                   key=lambda ix: (ix[0], _loss_key(ix[1].split(" ")[0]), ix[1]))
    vals, examples = {}, {}
    for model, label in order:
        sub = runs[(runs["model"] == model) & (runs["label"] == label)].sort_values("seed")
        examples[(model, label)] = [h.get("by_example") for h in sub["heldout"]]
        cells = []
        for k in keys:
            scale = HELDOUT_METRICS[k][1]
            v = np.array([h.get(k, np.nan) for h in sub["heldout"]], dtype=float)
            vals[(model, label, k)] = (list(sub["seed"].astype(int)), v)
            cells.append(_fmt(float(np.nanmean(v)) * scale, float(np.nanstd(v, ddof=1)) * scale if len(v) > 1 else None,
                              1 if scale == 100.0 else 3))
        lines.append(f"| {model} | {label} | {len(sub)} | " + " | ".join(cells) + " |")
    for model, label in order:
        base = runs[(runs["model"] == model) & (runs["loss"] == baseline)]
        if base.empty or label == base["label"].iloc[0]:
            continue
        for k in keys:
            sa, a = vals[(model, label, k)]
            sb, b = vals[(model, base["label"].iloc[0], k)]
            sums = _per_problem_sums(k, examples[(model, label)], examples[(model, base["label"].iloc[0])])
            if sums is None:  # one value per trained model: seeds resampled only
                d = seed_bootstrap(a, b, sa, sb, n_boot=n_boot, seed=seed, level=level)
            else:  # per-solution sums stored: seeds, then problems; the point stays the runs' own scalars
                d = replace(ratio_bootstrap(sums[:2], sums[2:], sa, sb, n_boot=n_boot, seed=seed, level=level),
                            delta=float(np.mean(a) - np.mean(b)))
            rows.append({"model": model, "loss": label, "metric": k, **d.as_dict(with_p)})
    return "\n".join(lines), pd.DataFrame(rows)


def across_models(df: pd.DataFrame, base_model: str, loss: str = "mle", n_boot: int = 2000) -> tuple[str, pd.DataFrame]:
    """``loss`` of every other model minus ``loss`` of ``base_model``, accuracy and numerical distance,
    with the seed-aware intervals of ``paired_bootstrap`` (e.g. MLE with a digit-chunking tokenizer
    against MLE with single-digit tokens: the tokenisation effect itself). Markdown and the rows."""
    sub = df[df["loss"] == loss].copy()
    if base_model not in set(sub["model"]):
        raise ValueError(f"no {loss} results of model {base_model!r} among {sorted(set(sub['model']))}")
    sub["loss"] = sub["model"].map(lambda m: f"{loss} ({m})")
    sub["model"] = "across models"
    sub["alpha"] = None
    base = f"{loss} ({base_model})"
    acc = paired_bootstrap(sub, baseline=base, n_boot=n_boot)
    dist = paired_bootstrap(sub, baseline=base, n_boot=n_boot, score=DISTANCE)
    md = [f"Each model's {loss} minus `{base}`, accuracy points (seed-aware 95% CI; `*` as above):", "",
          _vs_mle_pivot(acc, lambda r: _ci_cell(r)).reset_index().to_markdown(index=False)] if not acc.empty else []
    if not dist.empty:
        md += ["", "Numerical distance (negative = closer to the truth):", "",
               _vs_mle_pivot(dist, lambda r: _ci_cell(r, f=".3f")).reset_index().to_markdown(index=False)]
    rows = pd.concat([acc.assign(metric="accuracy"), dist.assign(metric="numerical_distance")], ignore_index=True)
    return "\n".join(md), rows


def invocation(tool: str) -> str:
    """This process's command as a user types it: ``python -m <tool> <args>`` (``sys.argv[0]`` is the module's
    absolute path under ``-m``, which names this machine, not the command)."""
    return " ".join(["python", "-m", tool, *(shlex.quote(a) for a in sys.argv[1:])])


def header(command: str | None, tool: str = "numlearn.reporting.aggregate", out_dir: str | Path | None = None) -> str:
    """Provenance lines of a generated table; ``out_dir``: where it is written (its own earlier
    outputs there do not make the tree dirty)."""
    from numlearn.provenance import environment, git_info

    g = git_info(products=out_dir)
    env = environment()
    return "\n".join([
        f"<!-- generated by {tool}; do not edit by hand -->",
        f"- command: `{command or invocation(tool)}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- git: {g['commit']}{' (dirty)' if g['dirty'] else ''}",
        f"- machine: {platform.platform()}, {env.get('cpu_count')} CPUs, device {env.get('device')}",
    ])


def load_table_results(paths, protocol: str | None = None, skip_bad: bool = False, skipped: list | None = None,
                       exclude_benchmarks=(), selected: str | Path | None = None,
                       recipe_may_differ_in: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict | None]:
    """The result rows a table is built from (``load_results``), without ``exclude_benchmarks`` (the
    split the weights were chosen on), with the rows at the sweep's chosen weights labelled from
    ``selected`` (``selected.json``); also returns that file's content (None without one)."""
    df = load_results(paths, protocol, skip_bad, skipped, recipe_may_differ_in)
    sel = None
    if selected:
        try:
            sel = json.loads(Path(selected).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise FileNotFoundError(f"{selected}: not a readable selected.json ({e}); re-run make sweep-report") from None
        df = mark_selected(df, sel)
    if exclude_benchmarks:
        df = df[~df["benchmark"].isin(list(exclude_benchmarks))]
        if df.empty:
            raise FileNotFoundError(f"no results left after excluding benchmarks {list(exclude_benchmarks)}")
    return df, sel


@dataclass(frozen=True)
class Selection:
    """Which results a table is built from: the scorer (``protocol``; default: the one the results share),
    unreadable files left out and named (``skip_bad``), benchmarks left out (``exclude_benchmarks``: the
    split the weights were chosen on) and the sweep's chosen weights (``selected``: a selected.json)."""

    protocol: str | None = None
    skip_bad: bool = False
    exclude_benchmarks: tuple[str, ...] = ()
    selected: str | Path | None = None
    recipe_may_differ_in: tuple[str, ...] = ()  # recipe keys the rows may differ in (train.learning_rate)


def aggregate(paths, out_dir, command: str | None = None, reference: bool = True, n_boot: int = 2000,
              select: Selection = Selection(), baseline: str = "mle") -> dict:
    """Table 1 of the result files under ``paths`` into ``out_dir``: table1.md (accuracy, distance, digit
    accuracy, each row minus MLE with its seed-aware interval, held-out digit metrics), table1.csv/.tex,
    summary.json and the comparisons' CSVs. ``baseline``: the row the others are compared with (a loss or a
    loss config's tag: the tuned MLE, ``mle_lr0.006``)."""
    skipped: list[str] = []
    df, sel = load_table_results(paths, select.protocol, select.skip_bad, skipped, select.exclude_benchmarks,
                                 select.selected, select.recipe_may_differ_in)
    for f in skipped:
        log.warning("skipped unreadable %s", f)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, mean, std, cols = _accuracy_sections(df, out, command, reference, skipped)
    if sel:
        md += ["", "Rows marked *val-chosen*: the loss's weight chosen on the validation split, never a test "
               f"split (`{select.selected}`: " + "; ".join(
                   f"{loss} alpha={float(c['alpha']):g}" + (
                       f", best mean {c.get('column', 'validation')} accuracy {c['accuracy']:.1f} % over "
                       f"{c.get('seeds', '?')} seeds" if "accuracy" in c else "")
                   for loss, c in sel.items()) + ")."]
        if overlap := _selection_seeds_in(df, sel):
            md[-1] += (f" Their cells include the selection seeds ({', '.join(map(str, overlap))}), so lean optimistic; "
                       "robustness.md tests them on the other seeds only.")
    md += _distance_section(df, out, mean, std)
    dig = digit_table(df)
    if not dig.empty:
        dig.to_csv(out / "digits.csv")
        md += ["", "## Per-digit-position accuracy (%, mean over seeds)", "", dig.reset_index().to_markdown(index=False)]
    if baseline != "mle" and not (df["loss"] == baseline).any():  # a table without MLE has no comparisons
        raise ValueError(f"no {baseline!r} row to compare with (rows: {', '.join(sorted(set(df['loss'])))})")
    boot = paired_bootstrap(df, baseline=baseline, n_boot=n_boot)
    md += _versus_mle_sections(df, out, boot, n_boot, baseline) + _heldout_section(df, out, n_boot, baseline)
    text = "\n".join(md) + "\n"
    (out / "table1.md").write_text(text)
    summary = {"n_results": len(df), "protocol": df["protocol"].iloc[0], "columns": cols, "rows": [list(ix) for ix in mean.index],
               "macc": {f"{m}/{lab}": float(v) for (m, lab), v in mean[MACC].items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return {"markdown": text, "mean": mean, "std": std, "bootstrap": boot, "digits": dig}


def _accuracy_sections(df: pd.DataFrame, out: Path, command: str | None, reference: bool, skipped: list[str]):
    """table1.md's header and accuracy table (with the paper's mACC rows where ``reference``), and table1.tex."""
    seeds = n_seeds(df)
    mean, std, cols = accuracy_table(df)
    ref_rows = [{"model": m, "loss": loss, MACC: v} for (m, loss), v in PAPER_MACC.items()] if reference else []
    md = [header(command, out_dir=out), f"- evaluation protocol: {df['protocol'].iloc[0]}"
          + (f"; {len(skipped)} unreadable result file(s) skipped" if skipped else ""), "", "## Accuracy (%)", "",
          "mean ± std over seeds; mACC = unweighted mean over the columns. Rows in *italics* are the paper's "
          "reported mACC over its seven benchmarks (authors' README), not comparable cell by cell.", "",
          to_markdown(mean, std, cols, seeds, 1, ref_rows)]
    (out / "table1.tex").write_text(to_latex(mean, std, cols) + "\n")
    return md, mean, std, cols


def _distance_section(df: pd.DataFrame, out: Path, mean: pd.DataFrame, std: pd.DataFrame) -> list[str]:
    """The numerical-distance table (where any prediction is a number), and table1.csv: accuracy, its std
    and the distance per column."""
    flat = mean.copy()
    flat.columns = [f"{c} acc" for c in flat.columns]
    sflat = std.copy()
    sflat.columns = [f"{c} acc_std" for c in sflat.columns]
    md: list[str] = []
    if df["numerical_distance"].notna().any():
        dmean, dstd, dcols = accuracy_table(df[df["numerical_distance"].notna()], "numerical_distance", 1.0,
                                            with_macc=False)
        md = ["", "## Numerical distance (mean |slog(pred) - slog(truth)|, lower is better)", "",
              to_markdown(dmean, dstd, dcols, n_seeds(df), 3)]
        dflat = dmean.copy()
        dflat.columns = [f"{c} dist" for c in dflat.columns]
        flat = flat.join(dflat)
    pd.concat([flat, sflat], axis=1).to_csv(out / "table1.csv")
    return md


def _versus_mle_sections(df: pd.DataFrame, out: Path, boot: pd.DataFrame, n_boot: int, baseline: str = "mle"
                         ) -> list[str]:
    """Each row minus MLE with its seed-aware interval: accuracy (``boot``; vs_mle.csv, with the problem-only
    interval as a secondary table) and numerical distance (distance_vs_mle.csv)."""
    md: list[str] = []
    if not boot.empty:
        boot.to_csv(out / "vs_mle.csv", index=False)
        piv = _vs_mle_pivot(boot, lambda r: _ci_cell(r))
        ppiv = _vs_mle_pivot(boot, lambda r: _ci_cell(r, "problem_ci_low", "problem_ci_high"))
        md += ["", f"## Each loss minus {_name(baseline)}, accuracy points (seed-aware 95% CI)", "",
               "Hierarchical bootstrap: training seeds and problems both resampled (seeds paired when both "
               "losses ran the same ones). `*` = significant: the interval excludes zero and each side has "
               f">= {MIN_SEEDS_FOR_SIGNIFICANCE} seeds. With one seed the interval is undefined (n/a).", "",
               piv.reset_index().to_markdown(index=False),
               "", "### Secondary: problem-only 95% CI (seeds averaged first; ignores seed-to-seed variation)", "",
               ppiv.reset_index().to_markdown(index=False)]
    dboot = paired_bootstrap(df, baseline=baseline, n_boot=n_boot, score=DISTANCE)
    if not dboot.empty:
        dboot.to_csv(out / "distance_vs_mle.csv", index=False)
        piv = _vs_mle_pivot(dboot, lambda r: _ci_cell(r, f=".3f"))
        md += ["", f"## Each loss minus {_name(baseline)}, numerical distance (seed-aware 95% CI; negative = closer to "
               "the truth)", "",
               "The same hierarchical bootstrap over each seed's mean distance on the problems whose prediction is a "
               "number (the table's per-seed metric). `*` as above.", "", piv.reset_index().to_markdown(index=False)]
    return md


def _selection_seeds_in(df: pd.DataFrame, sel: dict) -> list[int]:
    """The seeds of the val-chosen rows that the weight selection trained (``selected.json``'s ``seeds``: the
    sweep's first k seeds, 0..k-1), sorted; empty when the table holds none of them."""
    if "chosen" not in df:
        return []
    k = max((int(c.get("seeds", 0) or 0) for c in sel.values()), default=0)
    return sorted({int(s) for s in df.loc[df["chosen"], "seed"]} & set(range(k)))


def _name(baseline: str) -> str:
    """The baseline as the tables' headings name it: MLE, or a tagged row in backticks (`mle_lr0.006`)."""
    return "MLE" if baseline == "mle" else f"`{baseline}`"


def _heldout_section(df: pd.DataFrame, out: Path, n_boot: int, baseline: str = "mle") -> list[str]:
    """The held-out teacher-forced digit metrics (one value per trained model) and each row minus MLE on
    them (heldout_vs_mle.csv)."""
    held_md, held = heldout_table(df, baseline=baseline, n_boot=n_boot)
    if not held_md:
        return []
    md = ["", "## Held-out teacher-forced digit metrics (one value per trained model; mean ± std over seeds)", "",
          held_md]
    if not held.empty:
        held.to_csv(out / "heldout_vs_mle.csv", index=False)
        h = held.copy()
        scale = h["metric"].map(lambda k: HELDOUT_METRICS[k][1])
        for c in ("delta", "ci_low", "ci_high"):
            h[c] = h[c] * scale
        h["cell"] = h.apply(lambda r: _ci_cell(r, f=".1f" if HELDOUT_METRICS[r["metric"]][1] == 100.0 else ".3f"),
                            axis=1)
        h["metric"] = h["metric"].map(lambda k: HELDOUT_METRICS[k][0])
        hp = h.pivot_table(index=["model", "loss"], columns="metric", values="cell", aggfunc="first")
        md += ["", f"Each loss minus {_name(baseline)} (seed bootstrap 95% CI, paired by seed; `*` as above):", "",
               hp.reset_index().to_markdown(index=False)]
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Aggregate result.json files into Table 1.")
    ap.add_argument("results", nargs="+", help="result.json files or directories searched recursively")
    ap.add_argument("--out", required=True, help="output directory (e.g. results/table1_tiny)")
    ap.add_argument("--command", default=None, help="the command recorded in the header")
    ap.add_argument("--no-reference", action="store_true", help="omit the paper's reference rows")
    ap.add_argument("--wandb", action="store_true", help="also log the tables to W&B (offline without a key)")
    ap.add_argument("--protocol", default=None,
                    help="the scorer of the table (strict, official, math-verify: numlearn.evaluation.scorers; "
                         "default: the one the results share)")
    ap.add_argument("--skip-bad", action="store_true", help="leave out unreadable result files (named on stderr)")
    ap.add_argument("--exclude-benchmarks", default="",
                    help="comma-separated benchmarks to leave out (e.g. the validation split weights were chosen on)")
    ap.add_argument("--selected", default=None, metavar="SELECTED_JSON",
                    help="the sweep's chosen weights (results/sweep_alpha/selected.json): label those rows val-chosen")
    ap.add_argument("--baseline", default="mle", help="the row every other is compared with: a loss or a loss "
                                                      "config's tag (default mle; the tuned MLE: mle_lr0.006)")
    ap.add_argument("--recipe-may-differ-in", default="", metavar="KEY,...",
                    help="recipe keys the rows may differ in (train.learning_rate: the tuned MLE's)")
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    try:
        from numlearn.provenance import check_output_dir

        check_output_dir(a.out, "--out")
        select = Selection(protocol=a.protocol, skip_bad=a.skip_bad, selected=a.selected,
                           exclude_benchmarks=tuple(b for b in a.exclude_benchmarks.split(",") if b),
                           recipe_may_differ_in=tuple(k for k in a.recipe_may_differ_in.split(",") if k))
        res = aggregate(a.results, a.out, a.command, reference=not a.no_reference, select=select,
                        baseline=a.baseline)
    except (OSError, ValueError) as e:  # FileNotFoundError, a full disk, ...: one line
        print(f"numlearn.reporting.aggregate: error: {e}", file=sys.stderr)
        return 2
    print(res["markdown"])
    if a.wandb:
        from numlearn.tracking import log_tables

        log_tables(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
