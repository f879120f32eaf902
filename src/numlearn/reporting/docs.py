"""Numbers in prose that cannot drift from the committed results.

Two markers, both HTML comments (invisible on a code host):

* ``<!-- include: results/table1_tiny/table1.md#Accuracy (%) -->`` ... ``<!-- /include -->``: the
  block between them is the named section of a committed result file (from under its heading to the
  next heading of the same or a higher level; ``#`` alone: the whole file less its generated header).
  ``sync`` rewrites the blocks from the files; ``check`` fails when a block differs.
* ``<!-- numbers-from: results/table1_tiny results/sweep_alpha -->``: every decimal number written in
  the rest of the document (outside include blocks, code fences and inline code) must be a value of
  one of those files or folders (``.md``, ``.csv``, ``.json``, not recursing into the result store),
  at the precision it is written with; a fraction may be written as a percentage; an estimate with
  its interval, ``+9.3 [+3.4, +14.3]`` (or ``9.0 % [8.7, 9.3]``), must be written so, less the unit,
  in one of the Markdown tables. A number
  that is not there is reported with its line. The check runs from the marker to
  ``<!-- /numbers-from -->`` or the end of the document (a page may hold several such regions, so
  configuration values and versions outside them are not mistaken for results).

    python -m numlearn.reporting.docs sync README.md docs/results.md
    python -m numlearn.reporting.docs check README.md docs/results.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

INCLUDE = re.compile(r"(<!-- include: (?P<src>[^#\s]+)#(?P<section>[^>]*?) -->\n)(?P<body>.*?)(<!-- /include -->)",
                     re.S)
NUMBERS_FROM = re.compile(r"<!-- numbers-from: (?P<srcs>[^>]*?) -->(?P<region>.*?)(?:<!-- /numbers-from -->|\Z)", re.S)
FENCE = re.compile(r"```.*?```", re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
COMMENT = re.compile(r"<!--.*?-->", re.S)
# an estimate and its interval; a unit between them (``9.0 % [8.7, 9.3]``) is not in the table's cell
INTERVAL = re.compile(r"(?P<est>[-+]?\d+(?:\.\d+)?)(?: ?%)? (?P<ci>\[[-+]?\d+(?:\.\d+)?, [-+]?\d+(?:\.\d+)?\])")
DECIMAL = re.compile(r"(?<![\w.^/-])[-+−]?\d[\d,]*\.\d+(?![\d.])(?![BMK]\b)")  # not 2.5 of Qwen2.5, 1.5B
SKIP_DIRS = {"runs", "archive"}
SOURCE_SUFFIXES = {".md", ".csv", ".json"}


@dataclass(frozen=True)
class Problem:
    doc: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.message}"


def section(text: str, name: str) -> str:
    """The section ``name`` of a Markdown file: the lines under its heading up to the next heading of
    the same or a higher level, stripped of blank edges. ``""``: the file less its generated header
    (the ``<!-- generated ... -->`` line and the ``- key: value`` provenance lines after it)."""
    lines = text.splitlines()
    if not name:
        start = 0
        while start < len(lines) and (lines[start].startswith("<!--") or lines[start].startswith("- ")
                                      or not lines[start].strip()):
            start += 1
        return "\n".join(lines[start:]).strip("\n")
    for i, line in enumerate(lines):
        m = re.match(r"(#+) (.*)", line)
        if m and m.group(2).strip() == name:
            level = len(m.group(1))
            end = next((j for j in range(i + 1, len(lines))
                        if (h := re.match(r"(#+) ", lines[j])) and len(h.group(1)) <= level), len(lines))
            return "\n".join(lines[i + 1:end]).strip("\n")
    heads = [re.sub(r"^#+ ", "", x) for x in lines if re.match(r"#+ ", x)]
    raise KeyError(f"no section {name!r}; the file's headings: {heads}")


def _include_body(root: Path, src: str, name: str, doc_dir: str = ".") -> str:
    """The section, its relative links re-pointed from the result file's folder to the document's
    (``doc_dir``, relative to ``root``)."""
    path = root / src
    if not path.is_file():
        raise FileNotFoundError(f"include names {src}, which does not exist under {root}")
    body = section(path.read_text(encoding="utf-8"), name.strip())

    def relink(m):
        target = m.group(2)
        if re.match(r"[a-z]+:|#|/", target):
            return m.group(0)
        return f"{m.group(1)}({os.path.relpath(Path(src).parent / target, doc_dir)})"
    return re.sub(r"(\]|!\[[^\]]*\])\(([^)\s]+)\)", relink, body) + "\n"


def sync_text(text: str, root: Path, doc_dir: str = ".") -> str:
    """``text`` with every include block rewritten from its file; ``doc_dir``: the document's folder
    relative to ``root`` (where its relative links start)."""
    return INCLUDE.sub(lambda m: m.group(1) + _include_body(root, m.group("src"), m.group("section"), doc_dir)
                       + m.group(5), text)


def _files(root: Path, srcs: list[str]) -> list[Path]:
    files: list[Path] = []
    for s in srcs:
        p = root / s
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files += [f for f in sorted(p.rglob("*")) if f.is_file() and f.suffix in SOURCE_SUFFIXES
                      and not SKIP_DIRS & set(f.relative_to(p).parts[:-1])]
        else:
            raise FileNotFoundError(f"numbers-from names {s}, which does not exist under {root}")
    return files


def _values(files: list[Path]) -> list[float]:
    out: list[float] = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        if f.suffix == ".json":
            def walk(x):
                if isinstance(x, bool):
                    return
                if isinstance(x, (int, float)):
                    out.append(float(x))
                elif isinstance(x, dict):
                    for v in x.values():
                        walk(v)
                elif isinstance(x, list):
                    for v in x:
                        walk(v)
            walk(json.loads(text))
        for tok in re.findall(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text):
            out.append(float(tok))
    return out


def _matches(written: str, values: list[float]) -> bool:
    s = written.replace("−", "-").replace(",", "")
    x = abs(float(s))
    d = len(s.split(".")[1])
    tol = 0.5 * 10 ** -d + 1e-9
    return any(abs(abs(v) - x) <= tol or abs(abs(v) * 100 - x) <= tol for v in values)


def _masked(text: str) -> str:
    """The document with include blocks, comments, fences, inline code and link targets blanked out
    (newlines kept, so line numbers stay)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    for pat in (INCLUDE, FENCE, COMMENT, INLINE_CODE, LINK_TARGET):
        text = pat.sub(blank, text)
    return text


def check_text(text: str, root: Path, doc: str = "<doc>", doc_dir: str = ".") -> list[Problem]:
    problems: list[Problem] = []
    for m in INCLUDE.finditer(text):
        line = text[:m.start()].count("\n") + 1
        try:
            want = _include_body(root, m.group("src"), m.group("section"), doc_dir)
        except (KeyError, FileNotFoundError) as e:
            problems.append(Problem(doc, line, str(e)))
            continue
        if m.group("body") != want:
            problems.append(Problem(doc, line, f"the block from {m.group('src')}#{m.group('section')} differs "
                                               f"from the file: run `python -m numlearn.reporting.docs sync {doc}`"))
    masked = _masked(text)
    for decl in NUMBERS_FROM.finditer(text):
        srcs = decl.group("srcs")
        files = _files(root, srcs.split())
        values = _values(files)
        tables = "\n".join(f.read_text(encoding="utf-8") for f in files if f.suffix == ".md")
        start, end = decl.span("region")
        region = masked[start:end]
        for m in INTERVAL.finditer(region):  # an estimate with its interval is one string of a table, verbatim
            if f"{m.group('est')} {m.group('ci')}" not in tables:
                line = masked[:start + m.start()].count("\n") + 1
                problems.append(Problem(doc, line, f"{m.group(0)!r} is not written in the tables of {srcs}"))
        for m in DECIMAL.finditer(region):
            if not _matches(m.group(0), values):
                line = masked[:start + m.start()].count("\n") + 1
                problems.append(Problem(doc, line, f"{m.group(0)} is not a value of {srcs}"))
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m numlearn.reporting.docs", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["sync", "check"])
    ap.add_argument("docs", nargs="+", type=Path)
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository root the paths are relative to")
    a = ap.parse_args(argv)
    bad: list[Problem] = []
    for doc in a.docs:
        if not doc.is_file():
            print(f"error: {doc} does not exist", file=sys.stderr)
            return 2
        text = doc.read_text(encoding="utf-8")
        doc_dir = os.path.relpath(doc.resolve().parent, a.root.resolve())
        if a.action == "sync":
            new = sync_text(text, a.root, doc_dir)
            if new != text:
                doc.write_text(new, encoding="utf-8")
                print(f"{doc}: blocks rewritten from the result files")
        bad += check_text(doc.read_text(encoding="utf-8"), a.root, str(doc), doc_dir)
    for p in bad:
        print(p, file=sys.stderr)
    if not bad:
        print(f"{len(a.docs)} document(s): every include block and number matches the committed results")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
