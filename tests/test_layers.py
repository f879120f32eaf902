"""The import picture: data -> train -> run dir -> evaluate -> result JSON -> aggregate. Every module
of the package has a floor (LEVEL) and may import only modules on lower floors, imports inside
functions included (the AST is walked whole); a new module must be given a floor. On top of that,
FORBIDDEN keeps the data flow one way between floors that could otherwise see each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "numlearn"
# every top-level module and package of numlearn, by floor; imports point strictly downwards
LEVEL = {
    "records": 0,  # the run-dir paths and the RunRecord/ResultRecord contract: imports nothing of numlearn
    "schema": 0,  # the config schema (Hydra structured configs): imports nothing of numlearn
    "dtypes": 1, "provenance": 1, "tracking": 1, "cli": 1, "rundirs": 1, "losses": 1,
    "integrations": 2, "data": 2, "assets": 2,
    "training": 3, "evaluation": 3,
    "reporting": 4,
    "train": 5, "evaluate": 5, "probe": 5, "released": 5,
    "pipeline": 6,
    "scripts": 7,
}
# package -> numlearn packages/modules it must never import
FORBIDDEN = {
    "losses": {"data", "training", "evaluation", "reporting", "train", "evaluate", "tracking", "provenance", "cli",
               "integrations", "records"},
    # the library's trainer glue: the losses and the trainers it adapts, nothing of the pipeline
    "integrations": {"data", "training", "evaluation", "reporting", "train", "evaluate", "tracking", "provenance",
                     "cli", "rundirs", "records"},
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


def _modules() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for p in sorted(SRC.iterdir()):
        if p.suffix == ".py" and p.name != "__init__.py":
            out[p.stem] = [p]
        elif p.is_dir() and (p / "__init__.py").exists():
            out[p.name] = sorted(p.rglob("*.py"))
    return out


def test_every_module_has_a_floor():
    assert set(_modules()) == set(LEVEL), "give each new module a floor in LEVEL (and remove gone ones)"


@pytest.mark.parametrize("module", sorted(LEVEL))
def test_imports_point_downwards(module):
    bad = {}
    for f in _modules().get(module, []):
        up = {m for m in numlearn_imports(f) - {module} if LEVEL.get(m, 99) >= LEVEL[module]}
        if up:
            bad[str(f.relative_to(SRC))] = sorted(up)
    assert not bad, f"{module} (floor {LEVEL[module]}) imports from its floor or above: {bad}"


def test_the_checker_sees_imports_inside_functions():
    f = SRC / "pipeline.py"  # its reporting imports are all inside functions
    assert "reporting" in numlearn_imports(f)
