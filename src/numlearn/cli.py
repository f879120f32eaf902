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
        key = key.lstrip("+~")
        gdir = root / key
        if not gdir.is_dir() or not value or value == "null":
            continue
        choices = sorted(p.stem for p in gdir.glob("*.yaml"))
        for v in value.split(","):
            if v not in choices:
                sys.exit(f"{prog}: error: unknown {key} {v!r}; choose one of: {', '.join(choices)}")


def fail(prog: str, err: Exception) -> None:
    sys.exit(f"{prog}: error: {err}")
