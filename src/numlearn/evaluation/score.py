"""Recompute metrics from generation JSONL files alone, under either protocol.

    python -m numlearn.evaluation.score <generations.jsonl>... [--check]
    python -m numlearn.evaluation.score <generations.jsonl>... --protocol official --write

Nothing is generated and no program is run: each line keeps its attempts' completions and program
outputs, so one generation pass yields both tables. The benchmark and answer kind are read from
the sibling result.json. ``--check`` exits 1 when the metrics recomputed under the result's own
protocol differ from those stored; ``--write`` stores a rescored copy as ``result.<protocol>.json``
beside it (the aggregator reads those with ``--protocol``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from numlearn.records import RESULT, BadRecord, ResultRecord

from .metrics import compute_metrics, per_problem_scores
from .runner import read_jsonl, rescore
from .scorers import PROTOCOLS
from .spec import BenchmarkSpec


def _same(a, b, tol=1e-9) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= tol
    return a == b


def rescore_records(recs: list[dict], stored: dict, protocol: str) -> tuple[dict, list[dict]]:
    """Metrics and rows of a result's generations (``recs``, as read) under ``protocol``."""
    wanted = set(stored.get("correct_by_id") or {}) or None
    if wanted is not None:
        recs = [r for r in recs if r["id"] in wanted]
    force = bool(((stored.get("config") or {}).get("eval") or {}).get("force_choice_letter", False))
    b = stored["benchmark"]
    spec = BenchmarkSpec.from_config(b["spec"]) if b.get("spec") else b["name"]
    recs = rescore(recs, spec, protocol, force)
    return compute_metrics(recs, b["kind"]), recs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--protocol", choices=PROTOCOLS, default=None,
                    help="answer the generations under this protocol (default: the result's own)")
    ap.add_argument("--check", action="store_true", help="compare with the stored result.json")
    ap.add_argument("--write", action="store_true", help="write result.<protocol>.json beside each file")
    a = ap.parse_args(argv)
    status = 0
    for f in a.files:
        p = Path(f)
        res_path = p.with_name(RESULT)
        if not res_path.exists():
            print(f"{p}: no {RESULT} beside it (written by numlearn.evaluate); cannot tell the benchmark",
                  file=sys.stderr)
            return 2
        try:
            stored = ResultRecord.read(res_path)
        except BadRecord as e:
            print(e, file=sys.stderr)
            return 2
        recs = read_jsonl(p)[0]
        if "attempts" not in (recs or [{}])[0]:
            print(f"{p}: written before generations kept their attempts; re-run numlearn.evaluate to rescore",
                  file=sys.stderr)
            return 2
        protocol = a.protocol or stored.protocol
        m, recs = rescore_records(recs, stored.to_dict(), protocol)
        print(json.dumps({"file": str(p), "protocol": protocol, "metrics": m}, indent=1))
        if a.check:
            if protocol != stored.protocol:
                print(f"{p}: --check compares under the result's own protocol; drop --protocol", file=sys.stderr)
                return 2
            # metrics added since the file was written (e.g. the program-stop counts) are not compared
            ok = set(stored.metrics) <= set(m) and _same({k: m[k] for k in stored.metrics}, stored.metrics)
            print(f"{p}: {'matches' if ok else 'DIFFERS FROM'} {RESULT}", file=sys.stderr)
            status |= 0 if ok else 1
        if a.write:
            scores = per_problem_scores(recs, m)
            out = replace(stored, protocol=protocol, metrics=m, correct_by_id=scores["correct_by_id"],
                          distance_by_id=scores.get("distance_by_id", {}),
                          extra={**stored.extra, "n": m["n"], "rescored_from": str(p)})
            out.write(p.with_name(f"result.{protocol}.json"))
    return status


if __name__ == "__main__":
    sys.exit(main())
