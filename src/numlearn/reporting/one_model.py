"""One model's row on the paper's benchmarks, with intervals over problems: a model evaluated once (no seeds).

    python -m numlearn.reporting.one_model outputs/eval/qwen-coder-base --out results/qwen_coder_base

Each benchmark x mode cell is a proportion of ``n`` problems: its 95 % interval is Wilson's score interval (exact
enough at n = 100 and defined at 0 or n correct). The mean over benchmarks (mACC, the paper's summary) gets a
percentile bootstrap that resamples problems within each benchmark (2,000 draws, seed 0): the benchmarks are
fixed, the problems a sample. Throughput is read from each result's ``generation`` block (tokens the backend
generated, its seconds inside ``generate``, completions another mode of the same process had generated). The
result files are validated as every table's are (``collect.load_results``: verdicts are the mean of the
per-problem verdicts, one protocol, one recipe), and copied under ``<out>/eval`` so the table re-derives from
what is committed. The paper's mACC rows are quoted beside ours, never mixed.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from numlearn.reporting.aggregate import header, invocation
from numlearn.reporting.collect import load_results
from numlearn.reporting.paper import PAPER_MACC

Z95 = 1.959963984540054
MODES = ("cot", "pot", "paper")


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for k successes in n trials (proportions, not percent)."""
    if n <= 0:
        raise ValueError(f"wilson: n={n}; an interval needs at least one problem")
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per benchmark x mode: n, correct, accuracy and its Wilson interval (percent)."""
    rows = []
    for r in df.itertuples():
        verdicts = list((r.correct_by_id or {}).values())
        k, n = int(sum(bool(v) for v in verdicts)), len(verdicts)
        lo, hi = wilson(k, n)
        rows.append({"benchmark": r.benchmark, "mode": r.mode, "n": n, "correct": k,
                     "accuracy": 100.0 * k / n, "ci_low": 100.0 * lo, "ci_high": 100.0 * hi})
    return pd.DataFrame(rows).sort_values(["mode", "benchmark"], ignore_index=True)


def mean_over_benchmarks(df: pd.DataFrame, mode: str, n_boot: int = 2000, seed: int = 0) -> dict | None:
    """The mean accuracy over the benchmarks evaluated in ``mode`` and its 95 % percentile interval, problems
    resampled within each benchmark; None when no benchmark has that mode."""
    sub = df[df["mode"] == mode].sort_values("benchmark")
    if sub.empty:
        return None
    rng = np.random.default_rng(seed)
    per_bench = [np.array([bool(v) for v in (c or {}).values()], dtype=float) for c in sub["correct_by_id"]]
    point = float(np.mean([v.mean() for v in per_bench]))
    draws = np.mean([v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1) for v in per_bench], axis=0)
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return {"mode": mode, "benchmarks": list(sub["benchmark"]), "macc": 100 * point,
            "ci_low": 100 * float(lo), "ci_high": 100 * float(hi), "n_boot": n_boot}


def throughput(files: list[str]) -> pd.DataFrame:
    """Per result: generated tokens, the backend's seconds in ``generate``, tokens/s and reused completions."""
    rows = []
    for f in files:
        d = json.loads(Path(f).read_text())
        g = d.get("generation") or {}
        rows.append({"benchmark": (d.get("benchmark") or {}).get("name") or Path(f).parts[-3],
                     "mode": d.get("mode") or Path(f).parts[-2], "generated": g.get("n_generated"),
                     "tokens": g.get("generated_tokens"), "seconds": g.get("backend_generate_seconds"),
                     "tokens_per_s": g.get("tokens_per_s"), "reused": g.get("reused_completions", 0),
                     "backups": g.get("n_backup_generations", 0)})
    return pd.DataFrame(rows).sort_values(["mode", "benchmark"], ignore_index=True)


def _cell(r) -> str:
    return f"{r.accuracy:.1f} [{r.ci_low:.1f}, {r.ci_high:.1f}] ({r.correct}/{r.n})"


def _markdown(c: pd.DataFrame, maccs: list[dict], tp: pd.DataFrame, label: str) -> list[str]:
    modes = [m for m in MODES if m in set(c["mode"])]
    md = ["", f"## {label}: accuracy (%), 95 % Wilson interval over problems, (correct/n)", "",
          "| benchmark | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for b in sorted(set(c["benchmark"])):
        got = {r.mode: _cell(r) for r in c[c["benchmark"] == b].itertuples()}
        md.append(f"| {b} | " + " | ".join(got.get(m, "--") for m in modes) + " |")
    md += ["", "Mean over benchmarks (95 % bootstrap over problems within each benchmark):", "",
           "| mode | benchmarks | mean [95 % interval] |", "|---|---|---|"]
    md += [f"| {m['mode']} | {len(m['benchmarks'])} | {m['macc']:.1f} [{m['ci_low']:.1f}, {m['ci_high']:.1f}] |"
           for m in maccs]
    tokens, secs = tp["tokens"].fillna(0).sum(), tp["seconds"].fillna(0).sum()
    md += ["", "Throughput (the backend's own tokens and seconds inside `generate`; programs and loading excluded):",
           "", "| benchmark | mode | generated | reused | CoT backups | tokens | seconds | tokens/s |",
           "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r.benchmark} | {r.mode} | {r.generated} | {r.reused} | {r.backups} | {r.tokens} | {r.seconds} | "
           f"{'--' if pd.isna(r.tokens_per_s) else r.tokens_per_s} |" for r in tp.itertuples()]
    md.append(f"| all | | | | | {int(tokens)} | {secs:.1f} | {tokens / secs:.1f} |" if secs else "| all | | | | | | | |")
    return md


def _paper_rows() -> list[str]:
    rows = ["", "The paper's mACC (its README: fine-tuned 1.5B-7B models, all problems, bf16 on GPUs, mode `paper`); "
            "quoted, not comparable with the row above:", "", "| model | loss | mACC |", "|---|---|---|"]
    return rows + [f"| *paper: {m}* | *{loss}* | *{v}* |" for (m, loss), v in PAPER_MACC.items()]


def report(paths: list[str | Path], out: str | Path, command: str | None = None, label: str | None = None,
           copy: bool = True) -> dict:
    """Write ``<out>/table.md``, ``cells.csv`` and ``summary.json`` from one model's result files (and copy them
    under ``<out>/eval/<benchmark>/<mode>/``); returns the summary."""
    out = Path(out)
    df = load_results(list(paths))
    if df["model"].nunique() > 1 or df["loss"].nunique() > 1:
        raise ValueError(f"{[str(p) for p in paths]} hold results of {df['model'].nunique()} models x "
                         f"{df['loss'].nunique()} losses; this table is one model's: give one model's results")
    c, tp = cells(df), throughput(list(df["file"]))
    maccs = [m for mode in MODES if (m := mean_over_benchmarks(df, mode)) is not None]
    label = label or f"{df['model'].iloc[0]} ({df['loss'].iloc[0]})"
    out.mkdir(parents=True, exist_ok=True)
    if copy:
        for f, b, m in zip(df["file"], df["benchmark"], df["mode"]):
            dest = out / "eval" / b / m / "result.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            if Path(f).resolve() != dest.resolve():
                shutil.copyfile(f, dest)
    md = [header(command, "numlearn.reporting.one_model", out), f"- protocol: {df['protocol'].iloc[0]}; "
          f"results: {len(df)} files, copied under `{out / 'eval'}`, generated at git "
          f"{', '.join(sorted(set(df['git'].dropna())))}", *_markdown(c, maccs, tp, label), *_paper_rows()]
    (out / "table.md").write_text("\n".join(md) + "\n")
    c.to_csv(out / "cells.csv", index=False)
    summary = {"label": label, "protocol": df["protocol"].iloc[0], "git": sorted(set(df["git"].dropna())),
               "macc": maccs, "cells": c.to_dict("records"), "throughput": tp.to_dict("records")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="numlearn.reporting.one_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="result.json files or directories searched recursively")
    ap.add_argument("--out", required=True, help="output directory (e.g. results/qwen_coder_base)")
    ap.add_argument("--command", help="the command recorded in the header")
    ap.add_argument("--label", help="the row's name in the table (default: model (loss))")
    a = ap.parse_args(argv)
    try:
        s = report(a.results, a.out, a.command or invocation("numlearn.reporting.one_model"), a.label)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(f"{m['mode']}: mean {m['macc']:.1f} [{m['ci_low']:.1f}, {m['ci_high']:.1f}] over "
                    f"{len(m['benchmarks'])} benchmarks" for m in s["macc"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
