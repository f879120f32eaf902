"""Shared helpers of the Hydra entry points: where ``conf/`` is, and one-line errors for the
mistakes users make most (an unknown config choice, a missing data root)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def conf_dir() -> str:
    d = Path(os.environ.get("NUMLEARN_CONF_DIR", REPO_ROOT / "conf"))
    if not (d / "config.yaml").exists():
        sys.exit(f"error: Hydra config directory {d} not found; run from a clone of numlearn "
                 "(pip install -e .) or set NUMLEARN_CONF_DIR")
    return str(d)


def check_group_overrides(argv: list[str], prog: str) -> None:
    """Exit with one line naming the valid choices when ``group=value`` names no config file."""
    root = Path(conf_dir())
    for arg in argv[1:]:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key.startswith("+") and not key.startswith("++") and "." in key:
            _check_added_key(root, key.lstrip("+"), prog)
        key = key.lstrip("+~")
        gdir = root / key
        if not gdir.is_dir() or not value or value == "null":
            continue
        choices = sorted(p.stem for p in gdir.glob("*.yaml"))
        for v in value.split(","):
            if v not in choices:
                sys.exit(f"{prog}: error: unknown {key} {v!r}; choose one of: {', '.join(choices)}")


def fail(prog: str, err: Exception, run_dir=None, output_root=None) -> None:
    if run_dir is not None:
        remove_if_junk(run_dir, output_root)
    sys.exit(f"{prog}: error: {err}")


def remove_if_junk(run_dir, stop_at=None) -> None:
    """After a failure before any work: remove the run dir Hydra created for it (``.hydra/``, a
    ``train.log`` / ``evaluate.log``, ``eval/.hydra/``) and its then-empty parents below
    ``stop_at``, so bad input leaves nothing behind. A dir holding anything else is kept."""
    import shutil

    d = Path(str(run_dir))
    if not d.is_dir():
        return
    names = {p.name for p in d.iterdir()}
    if not names <= {".hydra", "train.log", "evaluate.log", "eval"}:
        return
    if "eval" in names and {p.name for p in (d / "eval").iterdir()} - {".hydra"}:
        return
    shutil.rmtree(d, ignore_errors=True)
    stop = Path(str(stop_at)).resolve() if stop_at is not None else None
    for parent in d.resolve().parents:
        if stop is not None and (parent == stop or stop not in parent.parents):
            break
        try:
            parent.rmdir()  # only while empty
        except OSError:
            break


def require_extra(modules: tuple[str, ...], extra: str, prog: str) -> None:
    """Exit with one line naming the extra to install when a reproduction dependency is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"{prog}: error: {', '.join(missing)} not installed: {prog} needs the [{extra}] extra "
                 f"(pip install 'numlearn[{extra}]', or `make setup` in a clone for the pinned set)")


def _check_added_key(root: Path, dotted: str, prog: str) -> None:
    """``+train.max_stepz=3`` adds a key no code reads: exit with one line (and the nearest known key)
    when ``group.key`` names a config group whose files define no such key. ``++`` forces it."""
    import difflib

    from omegaconf import OmegaConf

    group, _, rest = dotted.partition(".")
    gdir = root / group
    if not gdir.is_dir() or not rest:
        return
    known = set()
    for f in gdir.glob("*.yaml"):
        node = OmegaConf.load(f)
        if hasattr(node, "keys"):
            known.update(str(k) for k in node.keys())
    known.update(p.name for p in gdir.iterdir() if p.is_dir())  # nested groups (eval/benchmark)
    first = rest.split(".", 1)[0]
    if first not in known:
        near = difflib.get_close_matches(first, sorted(known), n=1)
        sys.exit(f"{prog}: error: +{dotted}: no {group} config defines {first!r}, so nothing would read it"
                 + (f"; did you mean {group}.{near[0]}?" if near else "")
                 + " (++ adds it anyway)")
