"""Every script in examples/ runs and checks itself: each asserts its gradient (or loss) equals the
reference it names -- one big batch, or the full-logits loss. The accelerate example also runs with
two CPU processes (distributed tier), where forgetting ``backward_scale`` gives a 4x smaller
gradient (checked by hand: max |grad diff| 9.4e-2 against 2.2e-8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
       "HOME": os.environ.get("HOME", "/tmp"), "WANDB_MODE": "disabled"}

CHECKS = {
    "plain_loop.py": "max |grad(4 x 2) - grad(1 x 8)|",
    "accelerate_loop.py": "1 process(es) x 2 accumulation",
    "hf_trainer.py": "Trainer, 4 x 2 accumulation",
    "trl_sft.py": "|loss(logits) - loss(fused)| by step",
    "from_hidden.py": "max |d loss / d hidden| difference",
}


def _run(cmd):
    r = subprocess.run(cmd, cwd=EXAMPLES, capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


@pytest.mark.long  # the default tier's time (make test-distributed and CI run it)
@pytest.mark.parametrize("script", sorted(CHECKS))
def test_example_runs(script):
    assert CHECKS[script] in _run([sys.executable, str(EXAMPLES / script)])


def test_every_example_is_run():
    assert {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")} == set(CHECKS)


@pytest.mark.distributed
def test_accelerate_example_two_processes():
    """Two CPU processes under ``accelerate launch`` (gloo), 2 accumulation steps each: the step's
    counts are all-reduced by ``step_counts`` and the loss scaled by ``backward_scale`` = 4."""
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    env_cpu = {"ACCELERATE_USE_CPU": "true"}
    ENV.update(env_cpu)
    try:
        out = _run([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                    "--mixed_precision", "no", "--dynamo_backend", "no", "accelerate_loop.py"])
    finally:
        for k in env_cpu:
            ENV.pop(k)
    assert "2 process(es) x 2 accumulation" in out
