"""`make tables-check`'s last step: the regenerated tables under results/ against the commit.

A Markdown table or any other text file must be byte-identical, the header lines `- date:`, `- git:` and
`- machine:` aside (they say when and where a table was written). A CSV must have the same cells, and a cell
that is a number may differ from the committed one by at most ``RTOL`` relative (``ATOL`` absolute near zero):
the bootstrap's means go through matrix products, whose BLAS kernel -- chosen per CPU -- may sum in another
order and move the 16th digit (1.3e-13 relative was the largest move seen between two machines). Every
Markdown table rounds far above that, so it stays strict. A file under results/ that git does not know fails.

    python tools/results_diff.py [results]      # exit 1 with one line per difference
"""

from __future__ import annotations

import csv
import io
import math
import re
import subprocess
import sys

RTOL = 1e-9
ATOL = 1e-12
HEADER = re.compile(r"^- (date|git|machine): ")


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def cells_agree(old: str, new: str) -> bool:
    """Equal text, or two finite numbers within ``RTOL`` of each other (``ATOL`` near zero); a NaN only matches
    the same text."""
    if old == new:
        return True
    a, b = _number(old), _number(new)
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(RTOL * max(abs(a), abs(b)), ATOL)


def csv_differences(old: str, new: str, name: str) -> list[str]:
    """One line per row or cell of CSV text ``new`` that differs from ``old`` beyond the tolerance."""
    rows_a, rows_b = list(csv.reader(io.StringIO(old))), list(csv.reader(io.StringIO(new)))
    if len(rows_a) != len(rows_b):
        return [f"{name}: {len(rows_b)} rows, the commit has {len(rows_a)}"]
    out = []
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True), 1):
        if len(ra) != len(rb):
            out.append(f"{name}:{i}: {len(rb)} cells, the commit has {len(ra)}")
            continue
        out += [f"{name}:{i}: cell {j} is {b!r}, the commit has {a!r}"
                for j, (a, b) in enumerate(zip(ra, rb, strict=True), 1) if not cells_agree(a, b)]
    return out


def text_differences(old: str, new: str, name: str) -> list[str]:
    """One line per line of ``new`` that differs from ``old``, the header's date/git/machine lines aside."""
    la, lb = old.splitlines(), new.splitlines()
    if len(la) != len(lb):
        return [f"{name}: {len(lb)} lines, the commit has {len(la)}"]
    return [f"{name}:{i}: {b!r}, the commit has {a!r}" for i, (a, b) in enumerate(zip(la, lb, strict=True), 1)
            if a != b and not (HEADER.match(a) and HEADER.match(b))]


def file_differences(old: str, new: str, name: str) -> list[str]:
    return csv_differences(old, new, name) if name.endswith(".csv") else text_differences(old, new, name)


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"results_diff: error: git {' '.join(args[:2])} failed ({r.stderr.strip()[:200]}): run it "
                         "in the checkout whose results/ it compares")
    return r.stdout


def main(argv: list[str]) -> int:
    root = argv[0] if argv else "results"
    problems = [f"{f}: not in git (a table the commit lacks)"
                for f in _git("ls-files", "--others", "--exclude-standard", "--", root).splitlines()]
    changed = _git("diff", "--name-only", "--", root).splitlines()
    for f in changed:
        deleted = not _exists(f)
        problems += [f"{f}: deleted"] if deleted else file_differences(
            _git("show", f"HEAD:{f}"), open(f, encoding="utf-8").read(), f)
    for p in problems:
        print(p)
    print(f"results_diff: {len(changed)} changed file(s) under {root}, {len(problems)} difference(s) beyond "
          f"the header lines and a CSV number's {RTOL:g} relative tolerance")
    return 1 if problems else 0


def _exists(path: str) -> bool:
    try:
        open(path, encoding="utf-8").close()
    except FileNotFoundError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
