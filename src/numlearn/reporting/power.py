"""The smallest difference a study can detect, stated before its runs (a power statement).

    python -m numlearn.reporting.power --base results/qwen_coder_base/cells.csv --benchmark gsm8k \
        --modes cot,pot --seeds 3,5 --family 12 --seed-sd 0,5,10

A difference is called significant here only when the two-level bootstrap (seeds, then problems) and the paired t
over seeds both exclude zero after Holm over the declared family, so a study must be powered for both:

* the bootstrap's spread, approximated normally: a row's accuracy minus the baseline's, averaged over ``s`` seeds on
  the same ``n`` problems, has variance ``seed_sd^2 / s + 2 p (1 - p) / (n s)`` (``p``: the base accuracy; the two
  models' verdicts taken as independent, which overstates the spread when they agree problem by problem);
  the minimum detectable difference is ``(z_{1 - a/2} + z_{power}) x`` its square root;
* the paired t over seeds sees only the seeds' spread of the difference: ``(t_{1 - a/2, s-1} + t_{power, s-1}) x
  seed_sd / sqrt(s)``, with ``s - 1`` degrees of freedom -- at 3 seeds and Holm's strictest step it needs a
  difference many times the seeds' spread.

``a`` is Holm's strictest step, ``alpha / family`` (the first comparison must clear it), and its loosest,
``alpha``. ``seed_sd`` (points) is not known before the runs: the statement is given over a range of it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from statistics import NormalDist

from numlearn.reporting.stats import t_quantile


@dataclass(frozen=True)
class Detectable:
    """Minimum detectable differences in proportion units (x 100 for points); ``t`` is inf below 2 seeds."""

    bootstrap: float
    t: float

    @property
    def both(self) -> float:
        """What a difference must reach for both tests at once."""
        return max(self.bootstrap, self.t)


def detectable(p: float, n: int, seeds: int, alpha_step: float, seed_sd: float = 0.0,
               power: float = 0.8) -> Detectable:
    """The minimum detectable difference at level ``alpha_step`` (two-sided) and ``power`` for a baseline accuracy
    ``p`` on ``n`` problems and ``seeds`` seeds; ``seed_sd``: the seeds' SD of a row's difference (proportion)."""
    if not (0 <= p <= 1 and n >= 1 and seeds >= 1 and 0 < alpha_step < 1 and 0.5 <= power < 1 and seed_sd >= 0):
        raise ValueError(f"detectable: p={p}, n={n}, seeds={seeds}, alpha={alpha_step}, power={power}, "
                         f"seed_sd={seed_sd}: need 0<=p<=1, n>=1, seeds>=1, 0<alpha<1, 0.5<=power<1, seed_sd>=0")
    nd = NormalDist()
    se = math.sqrt(seed_sd ** 2 / seeds + 2 * p * (1 - p) / (n * seeds))
    boot = (nd.inv_cdf(1 - alpha_step / 2) + nd.inv_cdf(power)) * se
    if seeds < 2:
        return Detectable(boot, math.inf)
    df = seeds - 1
    t = (t_quantile(1 - alpha_step / 2, df) + t_quantile(power, df)) * seed_sd / math.sqrt(seeds)
    return Detectable(boot, t)


def statement(p: float, n: int, seeds: list[int], family: int, seed_sds: list[float], alpha: float = 0.05,
              power: float = 0.8, label: str = "") -> str:
    """A Markdown table of minimum detectable differences (points) over seeds x seed SD, at Holm's strictest and
    loosest steps."""
    lines = [f"Minimum detectable difference (points) at {power:.0%} power{' -- ' + label if label else ''}: base "
             f"accuracy {100 * p:.1f} % on {n} problems, a family of {family} (Holm's strictest step a = {alpha}/"
             f"{family}, its loosest a = {alpha}); bootstrap | paired t | both", "",
             "| seeds | seed SD of a difference | strictest step | loosest step |", "|---|---|---|---|"]
    for s in seeds:
        for sd in seed_sds:
            cells = []
            for a in (alpha / family, alpha):
                d = detectable(p, n, s, a, sd / 100, power)
                t = "inf" if math.isinf(d.t) else f"{100 * d.t:.1f}"
                cells.append(f"{100 * d.bootstrap:.1f} / {t} / **{100 * d.both:.1f}**" if not math.isinf(d.both)
                             else f"{100 * d.bootstrap:.1f} / {t} / **inf**")
            lines.append(f"| {s} | {sd:g} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _base_accuracy(cells_csv: str, benchmark: str, mode: str) -> tuple[float, int]:
    import pandas as pd

    c = pd.read_csv(cells_csv)
    row = c[(c["benchmark"] == benchmark) & (c["mode"] == mode)]
    if row.empty:
        raise ValueError(f"{cells_csv}: no {benchmark}/{mode} cell (numlearn.reporting.one_model writes cells.csv)")
    return float(row["correct"].iloc[0]) / float(row["n"].iloc[0]), int(row["n"].iloc[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="numlearn.reporting.power", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a one_model cells.csv (the base row's per-cell counts)")
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--modes", default="cot", help="comma-separated modes of that benchmark")
    ap.add_argument("--seeds", default="3,5", help="comma-separated seed counts")
    ap.add_argument("--family", type=int, required=True, help="comparisons in the declared family (Holm)")
    ap.add_argument("--seed-sd", default="0,5,10", help="comma-separated seed SDs of a difference, points")
    ap.add_argument("--n", type=int, default=None, help="problems per evaluation (default: the base cell's)")
    a = ap.parse_args(argv)
    try:
        for mode in a.modes.split(","):
            p, n = _base_accuracy(a.base, a.benchmark, mode)
            print(statement(p, a.n or n, [int(s) for s in a.seeds.split(",")], a.family,
                            [float(x) for x in a.seed_sd.split(",")], label=f"{a.benchmark} {mode}") + "\n")
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
