"""Whether a reproduction agrees with the committed store, on any machine (issue 61 item 5).

The same seed trained on another CPU's kernels is another model (MLE's CoT accuracy moves by about 12 points),
so "0 of 28 identical" says nothing about agreement. Each new seed is instead read as one more draw of the
seed distribution the store sampled:

* every cell (row, benchmark column) of the new seed against the store's 95 % **prediction interval for a new
  seed**, ``mean +- t_{.975, k-1} sd sqrt(1 + 1/k)`` over the store's ``k`` other seeds of that row;
* every headline comparison (each row minus the baseline, MLE, on the primary column): whether the new seed's
  difference has the sign of the store's mean difference.

Pure functions of two result tables (``aggregate.load_table_results``' frames): nothing here trains or reads
files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .aggregate import _row_label
from .stats import t_quantile


def prediction_interval(values, level: float = 0.95) -> tuple[float, float]:
    """The interval a new draw falls in with probability ``level`` under a normal model of ``values`` (one per
    seed): ``mean +- t_{(1+level)/2, k-1} sd sqrt(1 + 1/k)``; NaNs below 2 values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    k = len(v)
    if k < 2:
        return float("nan"), float("nan")
    half = t_quantile((1 + level) / 2, k - 1) * float(v.std(ddof=1)) * np.sqrt(1 + 1 / k)
    return float(v.mean() - half), float(v.mean() + half)


@dataclass(frozen=True)
class Cell:
    row: str
    column: str
    seed: int
    value: float
    low: float
    high: float
    n_ref: int

    @property
    def inside(self) -> bool | None:
        """Inside the interval; None without one (fewer than 2 stored seeds)."""
        if not np.isfinite(self.low):
            return None
        return bool(self.low <= self.value <= self.high)


def _per_seed(df: pd.DataFrame) -> pd.DataFrame:
    """(label, column, seed) -> accuracy in %, one row each."""
    d = df.reset_index(drop=True)  # one label per row (frames concatenated from several stores repeat indices)
    d["label"] = _row_label(d)
    d["acc"] = 100.0 * d["accuracy"].astype(float)
    return d.groupby(["label", "column", "seed"], as_index=False)["acc"].first()


def cells(new: pd.DataFrame, ref: pd.DataFrame, level: float = 0.95) -> list[Cell]:
    """Each (row, column, seed) of ``new`` against the prediction interval of ``ref``'s other seeds of it."""
    a, b = _per_seed(new), _per_seed(ref)
    out = []
    for r in a.itertuples():
        others = b[(b["label"] == r.label) & (b["column"] == r.column) & (b["seed"] != r.seed)]["acc"]
        lo, hi = prediction_interval(others.to_numpy(), level)
        out.append(Cell(r.label, r.column, int(r.seed), float(r.acc), lo, hi, len(others)))
    return out


def headline_signs(new: pd.DataFrame, ref: pd.DataFrame, column: str, baseline: str = "mle") -> list[dict]:
    """Per new seed and row: the row minus ``baseline`` on ``column`` for that seed, the store's mean
    difference over its seeds, and whether the signs agree (a zero mean difference agrees with anything; a zero
    difference of the new seed is a tie, counted apart: it has no sign to agree or disagree)."""
    a, b = (t[t["column"] == column] for t in (_per_seed(new), _per_seed(ref)))
    if not ((a["label"] == baseline).any() and (b["label"] == baseline).any()):
        return []
    out = []
    ref_base = b[b["label"] == baseline].set_index("seed")["acc"]
    for label in sorted(set(a["label"]) - {baseline}):
        rows = b[b["label"] == label].set_index("seed")["acc"]
        common = sorted(set(rows.index) & set(ref_base.index))
        if not common:
            continue
        ref_mean = float((rows[common] - ref_base[common]).mean())
        for seed, v in a[a["label"] == label].set_index("seed")["acc"].items():
            base = a[(a["label"] == baseline) & (a["seed"] == seed)]["acc"]
            if base.empty:
                continue
            d = float(v - base.iloc[0])
            out.append({"row": label, "seed": int(seed), "difference": d, "store_mean": ref_mean, "tie": d == 0,
                        "same_sign": ref_mean == 0 or np.sign(d) == np.sign(ref_mean)})
    return out


def report(new: pd.DataFrame, ref: pd.DataFrame, column: str, baseline: str = "mle", level: float = 0.95
           ) -> list[str]:
    """The lines a reproduction ends with: the cells outside their prediction interval (each named), then the
    headline comparisons whose sign differs from the store's."""
    cs = cells(new, ref, level)
    judged = [c for c in cs if c.inside is not None]
    out = [c for c in judged if not c.inside]
    seeds = sorted({c.seed for c in cs})
    n_ref = max((c.n_ref for c in cs), default=0)
    lines = [f"seed {','.join(map(str, seeds))} against the store's other seeds (up to {n_ref}; {level:.0%} prediction "
             f"interval for a new seed): {len(judged) - len(out)} of {len(judged)} cells inside, about "
             f"{(1 - level) * len(judged):.1f} outside expected by chance"
             + (f" ({len(cs) - len(judged)} without an interval: fewer than 2 stored seeds)" if len(cs) > len(judged)
                else "")]
    lines += [f"  outside: {c.row} {c.column} seed {c.seed}: {c.value:.1f} (interval [{c.low:.1f}, {c.high:.1f}])"
              for c in out]
    signs = headline_signs(new, ref, column, baseline)
    if signs:
        ties = [s for s in signs if s["tie"]]
        flipped = [s for s in signs if not s["same_sign"] and not s["tie"]]
        lines.append(f"headline comparisons (each row minus {baseline}, {column}): {len(signs) - len(flipped) - len(ties)}"
                     f" of {len(signs)} have the store's sign" + (f", {len(ties)} tied at 0" if ties else ""))
        lines += [f"  other sign: {s['row']} seed {s['seed']}: {s['difference']:+.1f} (store's mean "
                  f"{s['store_mean']:+.1f})" for s in flipped]
    return lines


def recipe_note(differences: list[str]) -> str | None:
    """The line that says a run's recipe is not the store's (``rundirs.recipe_differences`` of the two): then the
    store's intervals describe another recipe, and cells outside them say so, not that the code changed."""
    if not differences:
        return None
    shown = "; ".join(differences[:3]) + (f"; and {len(differences) - 3} more" if len(differences) > 3 else "")
    return (f"this run's recipe is not the store's ({shown}): the intervals and signs below are the store's recipe's, "
            "so cells outside them are expected and say nothing about the code")
