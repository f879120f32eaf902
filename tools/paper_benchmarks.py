"""The paper's seven benchmark specs as the package ships them (``src/numlearn/evaluation/paper_benchmarks.json``),
derived from the clone's ``conf/eval/benchmark``, the one place they are written:

    python tools/paper_benchmarks.py           # print what the file should hold
    python tools/paper_benchmarks.py --write   # rewrite it (tests/test_scorers.py keeps the two equal)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def packaged_text() -> str:
    """The file's content from ``conf/eval/benchmark``."""
    from numlearn.cli import benchmark_configs
    from numlearn.evaluation.spec import PAPER_BENCHMARKS, BenchmarkSpec, spec_record

    specs = {c.name: BenchmarkSpec.from_config(c) for c in benchmark_configs(REPO / "conf")}
    return json.dumps({"source": "conf/eval/benchmark (python tools/paper_benchmarks.py --write)",
                       "benchmarks": [spec_record(specs[n]) for n in PAPER_BENCHMARKS]}, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the packaged file (else print it)")
    a = ap.parse_args(argv)
    text = packaged_text()
    if a.write:
        from numlearn.evaluation.spec import PACKAGED_FILE

        (REPO / "src" / "numlearn" / "evaluation" / PACKAGED_FILE).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
