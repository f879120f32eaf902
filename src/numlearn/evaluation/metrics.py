"""Metrics computed from generation records alone (so the scorer can recompute them).

* accuracy: mean of ``correct``;
* numerical distance ("Log MAE"): mean ``|slog(pred) - slog(truth)|`` with
  ``slog(x) = sign(x) * ln(|x| + 1e-8)``, over problems whose prediction and truth both parse
  as numbers (the paper's exact definition is not available; this is our documented choice);
* per-digit-position accuracy: integer digits indexed from the units place (0), fractional
  digits from the first decimal (1); a slot is right when the prediction has the same digit
  there; denominators are the problems whose truth has that slot (``n_digit_problems``: those
  whose truth parses; an empty or unparsable prediction gets every slot wrong). Under the
  official protocol ``digit_acc_official`` adds run_open.py's own figure, whose denominator is
  only the problems where the answer parses too (``official.digit_accuracy``);
* counts: empty predictions, unparsable numeric predictions, PoT program failures, CoT backups.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal, InvalidOperation

SLOG_EPS = 1e-8
# What each result.json records about its numeric metrics (the paper's eval prints no distance).
METRIC_NOTES = {
    "numerical_distance": "numlearn's definition: mean |slog(pred) - slog(truth)|, slog(x) = sign(x) ln(|x| + 1e-8), "
                          "over problems where both parse (n_numeric); the official eval prints no distance",
    "digit_acc_int": "numlearn's definition: slot k (units = 0) over problems whose truth has it (n_digit_problems: "
                     "truth parses; an unparsable or empty prediction is wrong in every slot)",
    "digit_acc_official": "protocol official only: run_open.py's per-digit accuracy, over the problems where the "
                          "answer and the truth both pass float() (its n_problems)",
    "n_program_memory_capped": "programs the sandbox's memory cgroup killed, as observed by the supervisor (the "
                               "official executor has no cap; none counted where no cgroup observes kills)",
    "n_program_output_capped": "programs whose output passed our cap (the official executor keeps all of it)",
}
MAX_POSITIONS = 8


def slog(x: float) -> float:
    return math.copysign(math.log(abs(x) + SLOG_EPS), x)


def _as_decimal(s: str) -> Decimal | None:
    try:
        d = Decimal(s)
        return d if d.is_finite() else None
    except (InvalidOperation, ValueError, TypeError):
        return None


def digit_slots(s: str) -> tuple[str, str]:
    """("integer digits", "fraction digits") of a canonical number string, sign dropped."""
    s = s.lstrip("-")
    ip, _, fp = s.partition(".")
    return ip, fp


def _slog_decimal(x: Decimal) -> float:
    """``slog`` of a number a float cannot hold (a 5,000-digit answer): ln|x| from the Decimal itself
    (the 1e-8 is below its precision there)."""
    f = float(x)
    if math.isfinite(f):
        return slog(f)
    return math.copysign(float(abs(x).ln()), f)


def _distance(t: Decimal, p: Decimal) -> float:
    return abs(_slog_decimal(p) - _slog_decimal(t))


def problem_distance(gt: str, pred: str) -> float | None:
    """``|slog(pred) - slog(truth)|`` of one problem; None when either does not parse as a number."""
    t = _as_decimal(gt)
    p = _as_decimal(pred) if pred != "" else None
    return None if t is None or p is None else _distance(t, p)


def per_problem_scores(records: list[dict], metrics: dict) -> dict:
    """What a result file keeps per problem for the seed-aware intervals: correctness, and for numeric
    answers the distance (None: the prediction is not a number)."""
    out = {"correct_by_id": {r["id"]: int(r["correct"]) for r in records}}
    if "numerical_distance" in metrics:
        out["distance_by_id"] = {r["id"]: problem_distance(r["gt"], r["pred"]) for r in records}
    return out


def numeric_metrics(records: list[dict]) -> dict:
    dists = []
    int_hit, int_tot = Counter(), Counter()
    frac_hit, frac_tot = Counter(), Counter()
    n_unparsable = n_truth = 0
    for r in records:
        t = _as_decimal(r["gt"])
        if t is None:
            continue
        n_truth += 1
        p = _as_decimal(r["pred"]) if r["pred"] != "" else None
        if p is None:
            n_unparsable += r["pred"] != ""
        else:
            dists.append(_distance(t, p))
        ti, tf = digit_slots(r["gt"])
        pi, pf = digit_slots(r["pred"]) if p is not None else ("", "")
        for k in range(min(len(ti), MAX_POSITIONS)):
            int_tot[k] += 1
            int_hit[k] += k < len(pi) and pi[-1 - k] == ti[-1 - k]
        for k in range(min(len(tf), MAX_POSITIONS)):
            frac_tot[k + 1] += 1
            frac_hit[k + 1] += k < len(pf) and pf[k] == tf[k]
    return {
        "numerical_distance": sum(dists) / len(dists) if dists else None,
        "n_numeric": len(dists),
        "n_digit_problems": n_truth,
        "n_unparsable": n_unparsable,
        "digit_acc_int": {str(k): int_hit[k] / int_tot[k] for k in sorted(int_tot)},
        "digit_acc_frac": {str(k): frac_hit[k] / frac_tot[k] for k in sorted(frac_tot)},
        "digit_count_int": {str(k): int_tot[k] for k in sorted(int_tot)},
        "digit_count_frac": {str(k): frac_tot[k] for k in sorted(frac_tot)},
    }


def compute_metrics(records: list[dict], kind: str) -> dict:
    n = len(records)
    correct = sum(bool(r["correct"]) for r in records)
    out = {
        "accuracy": correct / n if n else 0.0,
        "n": n,
        "n_correct": correct,
        "n_empty_pred": sum(r["pred"] == "" for r in records),
        "modes": dict(Counter(r["mode"] for r in records)),
        "n_program_failed": sum(r.get("program_ok") is False for r in records),
        # programs a bound of our sandbox stopped (memory cap, output cap, time): under the official
        # protocol the first two are bounds the authors' executor did not have
        "n_program_memory_capped": sum(r.get("program_stop") == "memory" for r in records),
        "n_program_output_capped": sum(r.get("program_stop") == "output" for r in records),
        "n_program_timed_out": sum(r.get("program_stop") == "timeout" for r in records),
    }
    if kind in ("number", "open_number"):  # open_number: result files written before the spec
        out.update(numeric_metrics(records))
    names = {r.get("protocol") for r in records}
    if len(names) == 1 and (name := names.pop()) is not None:  # the scorer's own figures (official: run_open.py's)
        from .scorers import get_scorer

        out.update(get_scorer(name).extra_metrics(records, kind))
    if any("correct_symbolic" in r for r in records):
        sym = [r["correct_symbolic"] for r in records if r.get("correct_symbolic") is not None]
        out["accuracy_symbolic"] = sum(sym) / len(sym) if sym else None
    return out
