"""One-off (issue 58 item 8): rewrite the committed files under results/ so that no path of the machine that wrote
them remains -- each absolute path through outputs/, data_cache/ or assets/ cut to start there, a data root
written as data/ (numlearn.records.portable_text, what result files are now written with). The text is
substituted in place, so nothing else of a file changes (the tables regenerate byte-identically: make
tables-check). Prints how many files changed.

    .venv/bin/python tools/portable_results.py [results]
"""

from __future__ import annotations

import sys
from pathlib import Path

from numlearn.records import portable_text


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "results")
    changed = 0
    for f in sorted(root.rglob("*")):
        if not f.is_file() or f.suffix not in (".json", ".md", ".csv", ".txt", ".jsonl"):
            continue
        text = f.read_text(encoding="utf-8")
        new = portable_text(text)
        if new != text:
            f.write_text(new, encoding="utf-8")
            changed += 1
    print(f"portable_results: {changed} file(s) rewritten under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
