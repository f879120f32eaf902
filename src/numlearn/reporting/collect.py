"""Read result JSON files (never logs) into a flat table, one row per (run, benchmark, mode)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from numlearn.records import BadRecord, ResultRecord
from numlearn.rundirs import recipe_differences, training_recipe

log = logging.getLogger(__name__)


def column_name(benchmark: str, mode: str) -> str:
    return benchmark if mode == "paper" else f"{benchmark} ({mode})"


class BadResultFile(BadRecord):
    pass


def shared_recipe(r: ResultRecord, ignore: tuple[str, ...] = ()) -> dict:
    """What the runs of one table must share: the training recipe of the run behind result ``r``
    (``run.recipe``, or the evaluation's composed config for older files) less its loss and seed
    (and what ``ignore`` names: a section, ``model`` for a table that compares tokenizers, or a key in one,
    ``train.learning_rate`` for a table that compares learning rates)."""
    rec = training_recipe(r.training_config)
    out = {k: v for k, v in rec.items() if k not in ("loss", "seed", *ignore)}
    for key in (k for k in ignore if "." in k):
        section, leaf = key.split(".", 1)
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k != leaf}
    return out


def check_one_recipe(recipes: dict[str, dict]) -> None:
    """``file -> shared_recipe``: refuse a table whose runs were trained under different recipes
    (a preset changed between sittings) -- their differences are not the losses'."""
    if not recipes:
        return
    files = sorted(recipes)
    first = recipes[files[0]]
    for f in files[1:]:
        diff = recipe_differences(first, recipes[f])
        if diff:
            raise ValueError(f"results mix training recipes: {files[0]} vs {f}: " + "; ".join(diff[:4])
                             + (" ..." if len(diff) > 4 else "") + ". A table compares losses under one recipe: "
                             "re-run the stale runs (make ... REUSE=1 finds them) or archive them out of the store")


def result_problem(r: ResultRecord, path: Path) -> str | None:
    """Why result ``r`` (read from ``path``) cannot be tabled as it stands, else None. Its numbers are
    recomputed, never trusted: accuracy must be a proportion, the mean of its per-problem verdicts over as
    many problems as its ``n``; and a file under a run directory (``.../alpha=A/seed=S/eval/B/M/``) must be
    that run's (a seed's files copied over another's would silently leave the table a seed short)."""
    import math

    m = r.metrics
    acc, n = m.get("accuracy"), m.get("n")
    if isinstance(acc, bool) or not isinstance(acc, (int, float)) or not math.isfinite(acc) or not 0 <= acc <= 1:
        return f"accuracy {acc!r} is not a proportion in [0, 1]"
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return f"n {n!r} is not a positive number of problems"
    verdicts = r.correct_by_id or {}
    if verdicts:
        if len(verdicts) != n:
            return f"n {n} but {len(verdicts)} per-problem verdicts"
        if abs(sum(bool(v) for v in verdicts.values()) / n - float(acc)) > 1e-9:
            return (f"accuracy {acc!r} is not the mean of its {n} per-problem verdicts "
                    f"({sum(bool(v) for v in verdicts.values())}/{n})")
    alpha = (r.run or {}).get("alpha")
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha)):
        return f"its run's alpha {alpha!r} is not a finite weight (its row would drop out of a table's groups)"
    parts = Path(path).parts  # <eval_dir>/<benchmark>/<mode>/result[.<protocol>].json
    if len(parts) >= 3 and tuple(parts[-3:-1]) != (r.benchmark_name, r.mode):
        return f"it sits under {parts[-3]}/{parts[-2]} but records {r.benchmark_name}/{r.mode} (a copied file?)"
    where = dict(x.split("=", 1) for x in parts[:-3] if x.startswith(("alpha=", "seed=")))
    run = r.run or {}
    if "seed" in where and run.get("seed") is not None and where["seed"] != str(run.get("seed")):
        return f"it sits under seed={where['seed']} but records seed {run.get('seed')} (a copied file?)"
    if "alpha" in where and run.get("alpha") is not None:
        try:
            same = float(where["alpha"]) == float(run["alpha"])
        except (TypeError, ValueError):
            same = False
        if not same:
            return f"it sits under alpha={where['alpha']} but records alpha {run.get('alpha')} (a copied file?)"
    return None


RESULT_KEY = ["experiment", "model", "loss", "alpha", "seed", "benchmark", "mode"]


def _one_result_per_cell(df: pd.DataFrame) -> pd.DataFrame:
    """Two files for the same run, benchmark and mode (a copied run dir, a re-evaluation beside the
    old one): identical ones are one result (counted on stderr); differing ones are an error naming
    both, never "whichever comes first"."""

    key = df[RESULT_KEY].astype(str).apply(tuple, axis=1)
    keep, dropped = [], 0
    first: dict = {}
    for i, k in enumerate(key):
        if k not in first:
            first[k] = i
            keep.append(i)
            continue
        a, b = df.iloc[first[k]], df.iloc[i]
        if a["correct_by_id"] != b["correct_by_id"] or a["accuracy"] != b["accuracy"] or \
                a["distance_by_id"] != b["distance_by_id"]:
            raise ValueError(f"two different results for {dict(zip(RESULT_KEY, k))}: {a['file']} and {b['file']}; "
                             "keep the one you mean (delete or archive the other) and rebuild the table")
        dropped += 1
    if dropped:
        log.warning("%d duplicate result file(s) (identical to another of the same run, benchmark and mode) counted "
                    "once", dropped)
    return df.iloc[keep].reset_index(drop=True)


def load_results(paths: list[str | Path], protocol: str | None = None, skip_bad: bool = False,
                 skipped: list | None = None, recipe_may_differ_in: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per result file. ``protocol``: take each generation's result under that protocol
    (see ``numlearn.evaluation.score --write``); None accepts one protocol only -- a table never
    mixes the two. A file that is not a readable result raises ``BadResultFile`` naming it, or with
    ``skip_bad`` is left out and appended to ``skipped``."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such result file or run directory; train and evaluate that run "
                                    "(make reproduce-table1 with its SEEDS) or leave it out")
        files.extend(sorted(p.rglob("result.json")) if p.is_dir() else [p])
    seen: set = set()  # overlapping paths name a file once
    files = [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]
    rows, missing, recipes = [], [], {}
    for f0 in files:
        try:
            r = ResultRecord.read(f0).for_protocol(protocol)
        except BadRecord as e:
            if not skip_bad:
                raise BadResultFile(f"{e} (or pass --skip-bad)") from None
            if skipped is not None:
                skipped.append(str(f0))
            continue
        if r is None:
            missing.append(str(f0))
            continue
        if (why := result_problem(r, f0)) is not None:
            raise BadResultFile(f"{f0}: {why}; re-run its evaluation (python -m numlearn.evaluate ..., it resumes) "
                                "or move the file out of the tree, then rebuild the table")
        m, run = r.metrics, r.run
        # a model no numlearn run produced (evaluated by path): one model, one row of its own, "seed" 0
        adhoc = run.get("run_dir") is None and run.get("seed") is None
        rows.append({
            "file": str(r.path), "experiment": run.get("experiment"), "model": run.get("model"),
            "loss": r.row, "alpha": run.get("alpha"), "seed": 0 if adhoc else run.get("seed"), "adhoc": adhoc,
            "protocol": r.protocol,
            "benchmark": r.benchmark_name, "mode": r.mode, "kind": r.benchmark.get("kind"),
            "column": column_name(r.benchmark_name, r.mode),
            "accuracy": m["accuracy"], "n": m["n"], "numerical_distance": m.get("numerical_distance"),
            "digit_acc_int": m.get("digit_acc_int") or {}, "digit_acc_frac": m.get("digit_acc_frac") or {},
            "correct_by_id": r.correct_by_id, "distance_by_id": r.distance_by_id,
            "git": r.git_commit, "heldout": r.heldout,
        })
        recipes[str(r.path)] = shared_recipe(r, recipe_may_differ_in)
    if missing:
        raise FileNotFoundError(f"{len(missing)} result(s) have no {protocol} scoring (e.g. {missing[0]}); run "
                                f"python -m numlearn.evaluation.score <generations.jsonl> --protocol {protocol} --write")
    if not rows:
        raise FileNotFoundError(f"no result.json under {[str(p) for p in paths]}; run numlearn.evaluate first")
    check_one_recipe(recipes)
    df = _one_result_per_cell(pd.DataFrame(rows))
    mixed = df.groupby(["model", "loss"], dropna=False)["adhoc"].nunique()
    if (mixed > 1).any():
        model, loss = mixed[mixed > 1].index[0]
        raise ValueError(f"row {model} / {loss} mixes a model evaluated by path with a training run's seeds: they are "
                         "not seeds of one recipe; aggregate them apart (or give the evaluated model its own name)")
    df = df.drop(columns="adhoc")  # the frame the tables are built from, as before: its column layout decides the
    # order of pandas' float sums, and the committed tables are byte-identical to it
    if df["protocol"].nunique() > 1:
        raise ValueError(f"results mix evaluation protocols {sorted(df['protocol'].unique())}; pass --protocol "
                         "strict or --protocol official (rescore with numlearn.evaluation.score --write)")
    return df
