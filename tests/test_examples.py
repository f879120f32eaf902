"""Every script in examples/ runs and checks itself (each asserts its gradient equals one big batch's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("script", ["plain_loop.py", "accelerate_loop.py"])
def test_example_runs(script):
    r = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=EXAMPLES, capture_output=True, text=True,
                       timeout=300, env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "grad(1 x 8)" in r.stdout or "one batch of 8" in r.stdout
