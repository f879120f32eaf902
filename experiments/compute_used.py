"""Core-hours the run dirs under some output roots used, per experiment (issue 27 asks each long study
to report its compute):

    python experiments/compute_used.py outputs /path/to/worktree/outputs

A run dir is a folder with a ``run.json`` (``numlearn.train``): its training core-seconds are
``train_runtime_s`` x the torch threads it ran with (``environment.torch_threads``), and each result
file under its ``eval/`` adds ``wall_seconds`` x its own ``environment.torch_threads``. Wall time x
threads is an upper bound on the cores used (a thread waiting on I/O counts); a run interrupted and
resumed counts only its last stretch of training (``train_runtime_s`` is the final process's), so the
total is a floor there. Run dirs are local: a study whose dirs are gone is not counted, and the
table says which experiments it found.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path


def run_cost(run_dir: Path) -> dict:
    """One run dir's training and evaluation core-seconds, and how many result files it holds; read
    through ``numlearn.records`` (a malformed file raises ``BadRecord``, naming it)."""
    from numlearn.records import ResultRecord, RunRecord

    run = RunRecord.of_run_dir(run_dir)
    train = float(run.extra.get("train_runtime_s") or 0.0) * _threads(run.extra)
    evals, n = 0.0, 0
    for f in sorted((run_dir / "eval").rglob("result.json")) if (run_dir / "eval").is_dir() else []:
        res = ResultRecord.read(f)
        evals += float(res.extra.get("wall_seconds") or 0.0) * _threads(res.extra)
        n += 1
    return {"experiment": run.experiment or "?", "complete": run.status == "complete",
            "train_core_s": train, "eval_core_s": evals, "n_results": n}


def _threads(record_extra: dict) -> int:
    return int((record_extra.get("environment") or {}).get("torch_threads") or 1)


def table(roots: list[Path]) -> list[dict]:
    rows: dict[str, dict] = defaultdict(lambda: {"runs": 0, "incomplete": 0, "results": 0, "train_core_s": 0.0,
                                                 "eval_core_s": 0.0})
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such output root (pass the folders holding the run dirs)")
        for rj in sorted(root.rglob("run.json")):
            c = run_cost(rj.parent)
            r = rows[c["experiment"]]
            r["runs"] += 1
            r["incomplete"] += not c["complete"]
            r["results"] += c["n_results"]
            r["train_core_s"] += c["train_core_s"]
            r["eval_core_s"] += c["eval_core_s"]
    return [{"experiment": k, **v} for k, v in sorted(rows.items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", type=Path, help="output roots (e.g. outputs/) to search for run dirs")
    a = ap.parse_args(argv)
    from numlearn.records import BadRecord

    try:
        rows = table(a.roots)
    except (FileNotFoundError, BadRecord) as e:
        print(f"compute_used: error: {e}", file=sys.stderr)
        return 2
    print("| experiment | run dirs | incomplete | result files | training (core-h) | evaluation (core-h) | total (core-h) |")
    print("|---|---|---|---|---|---|---|")
    if rows:
        rows.append({"experiment": "all", **{k: sum(r[k] for r in rows) for k in rows[0] if k != "experiment"}})
    for r in rows:
        t, e = r["train_core_s"] / 3600, r["eval_core_s"] / 3600
        print(f"| {r['experiment']} | {r['runs']} | {r['incomplete']} | {r['results']} | {t:.2f} | {e:.2f} | {t + e:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
