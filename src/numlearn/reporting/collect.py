"""Read result JSON files (never logs) into a flat table, one row per (run, benchmark, mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def column_name(benchmark: str, mode: str) -> str:
    return benchmark if mode == "paper" else f"{benchmark} ({mode})"


def load_results(paths: list[str | Path]) -> pd.DataFrame:
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files.extend(sorted(p.rglob("result.json")) if p.is_dir() else [p])
    rows = []
    for f in files:
        r = json.loads(f.read_text())
        run, m, b = r.get("run") or {}, r["metrics"], r["benchmark"]
        rows.append({
            "file": str(f), "experiment": run.get("experiment"), "model": run.get("model"),
            "loss": run.get("loss") or "?", "alpha": run.get("alpha"), "seed": run.get("seed"),
            "benchmark": b["name"], "mode": r["mode"], "kind": b.get("kind"), "column": column_name(b["name"], r["mode"]),
            "accuracy": m["accuracy"], "n": m["n"], "numerical_distance": m.get("numerical_distance"),
            "digit_acc_int": m.get("digit_acc_int") or {}, "digit_acc_frac": m.get("digit_acc_frac") or {},
            "correct_by_id": r.get("correct_by_id") or {},
            "git": (r.get("git") or {}).get("commit"),
        })
    if not rows:
        raise FileNotFoundError(f"no result.json under {[str(p) for p in paths]}; run numlearn.evaluate first")
    return pd.DataFrame(rows)
