"""The import picture: data -> train -> run dir -> evaluate -> result JSON -> aggregate. Each
package may import only what is below it; checked on the source, so a new upward import fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "numlearn"
# package -> numlearn packages/modules it must never import
FORBIDDEN = {
    "losses": {"data", "training", "evaluation", "reporting", "train", "evaluate", "tracking", "provenance", "cli",
               "integrations"},
    # the library's trainer glue: the losses and the trainers it adapts, nothing of the pipeline
    "integrations": {"data", "training", "evaluation", "reporting", "train", "evaluate", "tracking", "provenance",
                     "cli", "rundirs"},
    "data": {"training", "evaluation", "reporting", "train", "evaluate", "tracking"},
    "evaluation": {"training", "reporting", "train", "tracking"},
    "reporting": {"training", "evaluation", "train", "evaluate", "data", "losses"},
    "training": {"evaluation", "reporting", "evaluate"},
}


def numlearn_imports(path: Path) -> set[str]:
    pkg_parts = path.relative_to(SRC).parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = list(pkg_parts[: len(pkg_parts) - node.level + 1])
                names = [".".join(["numlearn", *base, *(node.module.split(".") if node.module else [])])]
            else:
                names = [node.module or ""]
        else:
            continue
        for n in names:
            if n.startswith("numlearn."):
                out.add(n.split(".")[1])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    bad = {}
    for f in sorted((SRC / package).rglob("*.py")):
        hit = numlearn_imports(f) & FORBIDDEN[package]
        if hit:
            bad[str(f.relative_to(SRC))] = sorted(hit)
    assert not bad, f"{package} imports {bad}"


def test_the_checker_sees_relative_and_absolute_imports():
    found = numlearn_imports(SRC / "evaluation" / "runner.py")
    assert "data" in found  # from numlearn.data.prompts import ...
    assert "evaluation" in found  # from .extract import ... (relative)
