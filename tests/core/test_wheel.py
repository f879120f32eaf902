"""The wheel: its metadata (the core requires torch alone, with a range; the reproduction is in
extras) and its library modules' messages (they cite no file a wheel install lacks). Builds the wheel
from a copy of the sources, or checks ``$NUMLEARN_WHEEL`` (``make test-core``)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = ("numlearn/losses/", "numlearn/integrations/")
# what a message could cite that only a clone has
CLONE_ONLY = re.compile(r"\b(conf|docs|examples|experiments|results|notebooks|tests|assets|data)/|Makefile|"
                        r"\bmake [a-z]|README|\.ci/|\b[\w-]+\.(?:yaml|md|ipynb|toml|sh)\b")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if os.environ.get("NUMLEARN_WHEEL"):
        return Path(os.environ["NUMLEARN_WHEEL"])
    pytest.importorskip("build")
    src = tmp_path_factory.mktemp("src")
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    shutil.copytree(REPO / "src" / "numlearn", src / "src" / "numlearn",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (whl,) = out.glob("numlearn-*.whl")
    return whl


def _metadata(whl):
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(name).decode())


def test_core_requires_torch_alone_with_a_range(wheel):
    reqs = _metadata(wheel).get_all("Requires-Dist")
    core = [r for r in reqs if "extra ==" not in r]
    assert core == ["torch>=2.13"], core  # the oldest torch a CPU test here can install (make test-core)


def test_reproduction_lives_in_extras(wheel):
    meta = _metadata(wheel)
    extras = set(meta.get_all("Provides-Extra"))
    assert {"hf", "trl", "train", "eval", "vllm", "dev"} <= extras
    by_extra = {}
    for r in meta.get_all("Requires-Dist"):
        if "extra ==" in r:
            req, extra = r.split(";")
            by_extra.setdefault(extra.split("==")[1].strip().strip('"'), []).append(req.strip())
    names = lambda e: {re.split(r"[<>=!\[ ]", r)[0].lower().replace("_", "-") for r in by_extra[e]}
    assert {"hydra-core", "omegaconf", "wandb", "datasets"} <= names("train")
    assert {"transformers", "accelerate"} <= names("hf")
    assert "trl<2,>=1.15" in by_extra["trl"] or "trl>=1.15,<2" in by_extra["trl"], by_extra["trl"]
    # ranges, not pins, for what a library user installs beside their own stack (make test-core runs both ends)
    pinned = [r for e in ("hf", "trl", "train", "eval") for r in by_extra[e] if "==" in r]
    assert not pinned, pinned


def test_wheel_holds_the_package_data_and_no_repo_files(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "numlearn/py.typed" in names
    assert any(n.startswith("numlearn/data/") and n.endswith(".json") for n in names)
    assert "numlearn/evaluation/paper_benchmarks.json" in names  # the paper's seven, known by name when installed
    assert not [n for n in names if n.startswith(("tests/", "conf/", "examples/"))]


def _message_strings(source: str):
    """String constants of a module that are not docstrings (messages, help texts)."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_library_messages_cite_nothing_the_wheel_lacks(wheel):
    z = zipfile.ZipFile(wheel)
    found = []
    for name in z.namelist():
        if name.startswith(LIBRARY) and name.endswith(".py"):
            for line, s in _message_strings(z.read(name).decode()):
                if CLONE_ONLY.search(s):
                    found.append(f"{name}:{line}: {s[:120]!r}")
    assert not found, "\n".join(found)


def test_the_scan_sees_a_message_citing_a_clone_file():
    src = 'def f():\n    """See conf/x.yaml."""\n    raise ValueError("set it in conf/loss/del.yaml")\n'
    assert [s for _, s in _message_strings(src) if CLONE_ONLY.search(s)] == ["set it in conf/loss/del.yaml"]
