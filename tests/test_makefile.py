"""The make targets that build Table 1 from the store, dry-run (`make -n`): which seeds each reads,
where it writes, and the command its tables record."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def _dry_run(*args: str) -> str:
    out = _make("-n", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _aggregate_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if "numlearn.reporting.aggregate" in ln]
    assert len(lines) == 1, out[-3000:]
    return lines[0]


def test_reproduce_table1_builds_its_tables_from_seeds_0_to_seeds_minus_1():
    out = _dry_run("reproduce-table1", "SEEDS=2", "REUSE=1", "JOBS=4")
    assert "xargs -P 4 -I{} bash experiments/run_row.sh .venv/bin/python 0,1 {}" in out  # every row, seeds 0-1
    assert "seed=0,1 " in out and "seed=0,1,2" not in out
    agg = _aggregate_line(out)
    assert "--out results/table1_tiny " in agg and '--command "make reproduce-table1 SEEDS=2 REUSE=1"' in agg
    assert "if [ 2 -ge 3 ]" in out  # robustness needs the 3 seeds a significance call needs


def test_table1_unswept_reads_only_the_seeds_the_weight_selection_never_saw():
    out = _dry_run("table1-unswept", "SEEDS=8", "SWEEP_SEEDS=3")
    assert "seed=3,4,5,6,7 " in out
    assert not any(f"seed={s}," in out for s in (0, 1, 2))
    agg = _aggregate_line(out)
    assert "--out results/table1_tiny/unswept_seeds " in agg
    assert '--command "make table1-unswept SEEDS=8"' in agg
    assert "if [ 5 -ge 3 ]" in out
    assert "run_row.sh" not in out  # tables only: nothing is trained or evaluated


def test_table1_tables_records_the_command_that_built_them():
    out = _dry_run("table1-tables", "TABLE1_SEEDS=3,4", "TABLE1_OUT=/tmp/t")
    assert "seed=3,4 " in out
    agg = _aggregate_line(out)
    assert '--out /tmp/t ' in agg and '--command "make table1-tables TABLE1_SEEDS=3,4 TABLE1_OUT=/tmp/t"' in agg


def test_table1_unswept_without_a_seed_beyond_the_sweep_is_a_clear_error():
    out = _make("table1-unswept", "SEEDS=3", "SWEEP_SEEDS=3")  # fails before any python runs
    assert out.returncode != 0
    assert "SEEDS=3 leaves no seed beyond the sweep's 3: give SEEDS > SWEEP_SEEDS" in out.stderr


def test_table1_tables_stops_when_a_row_cannot_be_resolved(tmp_path):
    """A row whose run directories cannot be named stops the target; the others must not make a
    smaller table (the selected rows' lookups come after the official rows' in one recipe)."""
    out = _make("table1-tables", "TABLE1_LOSSES=nosuchloss", "TABLE1_SEEDS=0", f"TABLE1_OUT={tmp_path}/t")
    assert out.returncode != 0
    assert not (tmp_path / "t").exists(), "a table was written without the row that failed"
