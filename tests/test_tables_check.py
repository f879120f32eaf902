"""Every committed study table regenerates from the committed store (issue 43): ``make tables-check`` run
in a copy of this checkout (the copy's own code, this checkout's .venv) trains nothing and leaves
``results/`` as committed, the header's date/git/machine lines aside. Marked ``long`` (~4-5 min on 2
cores): ``make test-distributed`` and CI run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long
REPO = Path(__file__).resolve().parents[1]


def _copy_checkout(dest: Path) -> None:
    """The tracked files as they are in the working tree (uncommitted edits too), timestamps kept so that
    make does not reinstall the .venv, committed into a fresh repository that ``git diff`` compares with."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for f in (f.decode() for f in files if f):
        src = REPO / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *cmd], cwd=dest, check=True, capture_output=True)
    for shared in ("assets", "data_cache"):  # tokenizers and the data cache: read, not regenerated
        if (REPO / shared).exists():
            (dest / shared).symlink_to(REPO / shared)


def test_every_committed_study_table_regenerates_from_the_store(tmp_path, data_dir):
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("make and git are needed")
    copy = tmp_path / "checkout"
    _copy_checkout(copy)
    venv = Path(sys.executable).parent.parent
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "NUMLEARN_DATA_DIR": str(data_dir),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(["make", "--no-print-directory", "tables-check", f"VENV={venv}"], cwd=copy, env=env,
                       capture_output=True, text=True, timeout=1500)
    tail = (r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, tail
    assert "tables-check: every committed table regenerated" in r.stdout, tail
    # REUSE=1 over a complete store: every row says "nothing to run", none lists seeds it would train
    said = r.stdout + r.stderr  # the planner's lines go to stderr
    missing = [ln for ln in said.splitlines() if "seeds without stored results" in ln]
    assert not missing and said.count("nothing to run") >= 20, (missing, tail)
