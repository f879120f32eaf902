"""Recompute metrics from generation JSONL files alone.

    python -m numlearn.evaluation.score outputs/.../eval/synthetic_test/cot/generations.jsonl [--check]

The answer kind is read from the sibling result.json when present (else ``--kind``). ``--check``
exits 1 when the recomputed metrics differ from those stored in result.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .runner import score_file


def _same(a, b, tol=1e-9) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= tol
    return a == b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--kind", default=None, help="open_number | open_math | multiple_choice")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    status = 0
    for f in a.files:
        p = Path(f)
        res_path = p.with_name("result.json")
        stored = json.loads(res_path.read_text()) if res_path.exists() else None
        kind = a.kind or (stored or {}).get("benchmark", {}).get("kind")
        if kind is None:
            print(f"{p}: no result.json beside it; pass --kind", file=sys.stderr)
            return 2
        m = score_file(p, kind)
        print(json.dumps({"file": str(p), "metrics": m}, indent=1))
        if a.check and stored is not None:
            ok = _same(m, stored["metrics"])
            print(f"{p}: {'matches' if ok else 'DIFFERS FROM'} result.json", file=sys.stderr)
            status |= 0 if ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
