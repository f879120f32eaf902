"""Seed-aware intervals for "loss minus baseline" differences.

A trained model is one draw from the training distribution (initialisation, data order), and the
benchmark is one draw of problems. An interval that resamples problems only treats the seeds we
happened to run as the whole population of models, so a loss whose runs differ by 20 points
from seed to seed can look "significantly" better on one lucky seed. The hierarchical bootstrap
here resamples both levels: seeds with replacement, then problems with replacement, and
recomputes the difference of means each time.

Paired designs: when both losses ran the same seeds, seed ``s`` of the loss and seed ``s`` of
the baseline share the initialisation and the data order, so the seeds are resampled *together*
(one draw of seed indices for both). Otherwise each side's seeds are resampled on their own.
Problems are always paired (the same benchmark items).

With fewer than two seeds on a side there is nothing to resample at the seed level: the
seed-aware interval is undefined (NaN) and the difference is never called significant.

A per-problem score may be missing (NaN) for some seeds -- the numerical distance of a prediction
that is not a number. Each seed's mean is then over the problems it scored, as the table's
per-seed metric is, and a replicate averages those per-seed means; with no NaN this is the plain
mean of the matrix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: a "significant" difference needs the seed-aware interval to exclude zero *and* this many seeds
#: on each side: with two seeds the percentile bootstrap has only three distinct seed draws.
MIN_SEEDS_FOR_SIGNIFICANCE = 3


@dataclass
class Difference:
    delta: float  # mean(loss) - mean(baseline), over seeds and problems
    ci_low: float  # seed-aware (hierarchical) percentile interval
    ci_high: float
    problem_ci_low: float  # secondary: problems resampled, seeds averaged first
    problem_ci_high: float
    n_seeds: int  # seeds of the loss
    n_seeds_baseline: int
    n_problems: int
    paired_seeds: bool
    significant: bool
    p_boot: float = float("nan")  # two-sided bootstrap p: 2 min(P(replicate <= 0), P(replicate >= 0))

    def as_dict(self, with_p: bool = False) -> dict:
        d = asdict(self)
        if not with_p:  # the committed tables' columns
            d.pop("p_boot")
        return d


def seed_mean_ci(values, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-seed values (one value per seed; NaNs with
    fewer than 2 seeds): the spread a sweep point's mean has over training seeds."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    q = 100 * (1 - level) / 2
    lo, hi = np.percentile(values[idx].mean(1), [q, 100 - q])
    return float(lo), float(hi)


def _counts(rng: np.random.Generator, k: int, n_boot: int) -> np.ndarray:
    """``[n_boot, k]`` multinomial counts: how often each of ``k`` items is drawn in a resample."""
    return rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot).astype(float)


def _significant(lo: float, hi: float, k_a: int, k_b: int) -> bool:
    return bool(min(k_a, k_b) >= MIN_SEEDS_FOR_SIGNIFICANCE and np.isfinite(lo) and (lo > 0 or hi < 0))


def seed_problem_bootstrap(a, b, seeds_a=None, seeds_b=None, n_boot: int = 2000, seed: int = 0,
                           level: float = 0.95) -> Difference:
    """Difference of means between ``a`` and ``b``, each ``[n_seeds, n_problems]`` (rows: training
    seeds, columns: the same problems in the same order; values: 0/1 correctness or any per-problem
    score). ``seeds_a``/``seeds_b`` name the rows; identical seed lists make the design paired."""
    return multi_column_bootstrap([a], [b], seeds_a, seeds_b, n_boot, seed, level)[0]


def multi_column_bootstrap(cols_a, cols_b, seeds_a=None, seeds_b=None, n_boot: int = 2000, seed: int = 0,
                           level: float = 0.95) -> list[Difference]:
    """Per-column differences and, when there is more than one column, their unweighted mean (the
    mACC difference) as the last element. One seed draw per replicate is shared by all columns
    (a seed is one trained model, evaluated on every column); problems are drawn per column."""
    cols_a = [np.asarray(x, dtype=float) for x in cols_a]
    cols_b = [np.asarray(x, dtype=float) for x in cols_b]
    k_a, k_b = cols_a[0].shape[0], cols_b[0].shape[0]
    for x, y in zip(cols_a, cols_b, strict=True):
        if x.ndim != 2 or y.ndim != 2 or x.shape[0] != k_a or y.shape[0] != k_b or x.shape[1] != y.shape[1]:
            raise ValueError(f"expected [seeds, problems] arrays with the same problems: {x.shape} vs {y.shape}")
    seeds_a = list(range(k_a)) if seeds_a is None else list(seeds_a)
    seeds_b = list(range(k_b)) if seeds_b is None else list(seeds_b)
    paired = seeds_a == seeds_b
    rng = np.random.default_rng(seed)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    seedable = min(k_a, k_b) >= 2
    design = _Design(q, k_a, k_b, paired, seedable)
    w_a = _counts(rng, k_a, n_boot) if seedable else None
    w_b = (w_a if paired else _counts(rng, k_b, n_boot)) if seedable else None
    out, boots, pboots, points, n_total = [], [], [], [], 0
    for x, y in zip(cols_a, cols_b, strict=True):
        n = x.shape[1]
        n_total += n
        v = _counts(rng, n, n_boot)  # [n_boot, n] problem counts, shared by both sides (paired problems)
        ra, rb = _seed_means(x, v), _seed_means(y, v)  # [k, n_boot] each seed's mean per problem draw
        point = _mean_of_seed_means(x) - _mean_of_seed_means(y)
        pb = _nanmean(ra) - _nanmean(rb)  # problem-only: the seeds as they are, problems resampled
        if seedable:
            boot = _nanmean(ra, w_a) - _nanmean(rb, w_b)
        else:
            boot = np.full(n_boot, np.nan)
        boots.append(boot)
        pboots.append(pb)
        points.append(point)
        out.append(_difference(point, boot, pb, n, design))
    if len(cols_a) > 1:
        out.append(_difference(float(np.mean(points)), np.mean(boots, 0), np.mean(pboots, 0), n_total, design))
    return out


def _seed_means(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``[k, n_boot]``: seed ``s``'s mean over its scored (non-NaN) problems under problem counts ``v``."""
    scored = np.isfinite(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(scored, x, 0.0) @ v.T) / (scored.astype(float) @ v.T)


def _mean_of_seed_means(x: np.ndarray) -> float:
    return float(_nanmean(_seed_means(x, np.ones((1, x.shape[1]))))[0])


def _nanmean(r: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Mean over seeds (rows of ``r``, ``[k, n_boot]``) with seed counts ``w`` (``[n_boot, k]``, default 1),
    skipping a seed that scored none of the drawn problems."""
    w = np.ones((r.shape[1], r.shape[0])) if w is None else w
    ok = np.isfinite(r.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w * np.where(ok, r.T, 0.0)).sum(1) / (w * ok).sum(1)


@dataclass(frozen=True)
class _Design:
    """What every column's difference of one comparison shares: the percentiles of its interval, the seed
    counts of its two sides, whether the seeds pair, and whether there are seeds enough to resample."""

    q: list[float]
    k_a: int
    k_b: int
    paired: bool
    seedable: bool


def _difference(point, boot, pboot, n, d: _Design) -> Difference:
    boot, pboot = np.asarray(boot), np.asarray(pboot)
    boot = boot[np.isfinite(boot)] if d.seedable else boot
    pboot = pboot[np.isfinite(pboot)]
    seedable = d.seedable and boot.size > 0
    lo, hi = np.percentile(boot, d.q) if seedable else (float("nan"), float("nan"))
    plo, phi = np.percentile(pboot, d.q) if pboot.size else (float("nan"), float("nan"))
    return Difference(point, float(lo), float(hi), float(plo), float(phi), d.k_a, d.k_b, n, d.paired,
                      _significant(float(lo), float(hi), d.k_a, d.k_b), bootstrap_p(boot) if seedable else float("nan"))


def bootstrap_p(boot) -> float:
    """Two-sided p of "no difference" from bootstrap replicates of a difference: twice the smaller tail
    share at zero, ``2 min(P(b <= 0), P(b >= 0))``, capped at 1 -- the level at which the percentile
    interval would just reach zero. Resolution 1/len(boot)."""
    b = np.asarray(boot, dtype=float)
    b = b[np.isfinite(b)]
    if b.size == 0:
        return float("nan")
    return float(min(1.0, 2 * min(np.mean(b <= 0), np.mean(b >= 0))))


# -- the paired t over seeds, and a family-wise correction -------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    import math

    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom."""
    if not np.isfinite(t):
        return 0.0 if np.isinf(t) else float("nan")
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(prob: float, df: int) -> float:
    """The ``prob`` quantile (prob in (0.5, 1)) of Student's t, by bisection on ``t_two_sided_p``."""
    target = 2 * (1 - prob)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > target else (lo, mid)
    return (lo + hi) / 2


@dataclass
class PairedT:
    mean: float  # mean of the per-seed differences
    ci_low: float
    ci_high: float
    p: float  # two-sided, H0: mean difference 0
    n_seeds: int


def paired_t(a, b, level: float = 0.95) -> PairedT:
    """The paired t over seeds: ``d_s = a_s - b_s`` (one value per seed both ran, in the same order), the
    interval ``mean(d) +- t_{(1+level)/2, k-1} sd(d) / sqrt(k)`` and its two-sided p. NaN below 2 seeds;
    a zero spread gives a zero-width interval and p 0 (or 1 when the mean is 0)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    d = d[np.isfinite(d)]
    k = len(d)
    if k < 2:
        return PairedT(float(d.mean()) if k else float("nan"), float("nan"), float("nan"), float("nan"), k)
    m, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(k))
    if se == 0:
        return PairedT(m, m, m, 1.0 if m == 0 else 0.0, k)
    half = t_quantile((1 + level) / 2, k - 1) * se
    return PairedT(m, m - half, m + half, t_two_sided_p(m / se, k - 1), k)


def holm(pvalues) -> list[float]:
    """Holm's step-down adjustment of ``pvalues`` (one family), in their given order: sorted ascending,
    the i-th smallest (1-based) becomes ``max over j <= i of min(1, (m - j + 1) p_(j))``. NaNs stay NaN
    and do not count in m."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def seed_bootstrap(a, b, seeds_a=None, seeds_b=None, n_boot: int = 2000, seed: int = 0,
                   level: float = 0.95) -> Difference:
    """Difference of means of per-seed scalars (e.g. held-out digit accuracy, one number per trained
    model): seeds resampled (paired when the seed lists match). The problem-level columns are NaN."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    seeds_a = list(range(len(a))) if seeds_a is None else list(seeds_a)
    seeds_b = list(range(len(b))) if seeds_b is None else list(seeds_b)
    paired = seeds_a == seeds_b
    point = float(a.mean() - b.mean())
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    if min(len(a), len(b)) < 2:
        lo = hi = float("nan")
    else:
        rng = np.random.default_rng(seed)
        w_a = _counts(rng, len(a), n_boot)
        w_b = w_a if paired else _counts(rng, len(b), n_boot)
        boot = w_a @ a / len(a) - w_b @ b / len(b)
        lo, hi = (float(v) for v in np.percentile(boot, q))
    return Difference(point, lo, hi, float("nan"), float("nan"), len(a), len(b), 0, paired,
                      _significant(lo, hi, len(a), len(b)), bootstrap_p(boot) if min(len(a), len(b)) >= 2
                      else float("nan"))


def ratio_bootstrap(a, b, seeds_a=None, seeds_b=None, n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> Difference:
    """The two-level bootstrap (seeds, then problems) of a difference of per-seed ratios of sums: each side,
    ``a`` and ``b``, is a pair ``(num, den)`` of ``[n_seeds, n_problems]`` per-problem sums over the same problems in the same order (held-out
    digit accuracy: correct digits / digits of each solution; digit NLL: summed NLL / digits), a seed's value
    ``sum(num) / sum(den)`` over its (resampled) problems. As ``multi_column_bootstrap``: one problem draw per
    replicate shared by both sides (paired problems), seeds drawn with the design's pairing."""
    num_a, den_a, num_b, den_b = (np.asarray(x, dtype=float) for x in (*a, *b))
    if not (num_a.shape == den_a.shape and num_b.shape == den_b.shape and num_a.ndim == 2 and num_b.ndim == 2
            and num_a.shape[1] == num_b.shape[1]):
        raise ValueError(f"expected [seeds, problems] sums over the same problems: {num_a.shape}/{den_a.shape} vs "
                         f"{num_b.shape}/{den_b.shape}")
    k_a, k_b, n = num_a.shape[0], num_b.shape[0], num_a.shape[1]
    seeds_a = list(range(k_a)) if seeds_a is None else list(seeds_a)
    seeds_b = list(range(k_b)) if seeds_b is None else list(seeds_b)
    paired = seeds_a == seeds_b
    rng = np.random.default_rng(seed)
    seedable = min(k_a, k_b) >= 2
    design = _Design([(1 - level) / 2 * 100, (1 + level) / 2 * 100], k_a, k_b, paired, seedable)
    w_a = _counts(rng, k_a, n_boot) if seedable else None
    w_b = (w_a if paired else _counts(rng, k_b, n_boot)) if seedable else None
    v = _counts(rng, n, n_boot)
    with np.errstate(invalid="ignore", divide="ignore"):
        ra = (num_a @ v.T) / (den_a @ v.T)  # [k, n_boot]: each seed's ratio under the problem draw
        rb = (num_b @ v.T) / (den_b @ v.T)
        point = float(np.mean(num_a.sum(1) / den_a.sum(1)) - np.mean(num_b.sum(1) / den_b.sum(1)))
    boot = _nanmean(ra, w_a) - _nanmean(rb, w_b) if seedable else np.full(n_boot, np.nan)
    return _difference(point, boot, _nanmean(ra) - _nanmean(rb), n, design)
