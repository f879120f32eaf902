"""Storage that fails under a run (issue 41, item 12): a full disk and a read-only output dir, during training
and during evaluation. Each stops with one line that names the cause and the fix, and nothing half-written
is taken as complete afterwards (the run dir is not complete, no result.json is written, and the same
command resumes).

The faults are real: a size-bounded tmpfs (full disk) or a read-only bind (read-only dir) mounted over the
output dir by bubblewrap, in a mount namespace of the test's own; nothing of the host is touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL = ["train=smoke", "model.config.hidden_size=32", "model.config.intermediate_size=64",
         "model.config.num_hidden_layers=2", "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2",
         "model.vocab_size=300", "data.n_train=200"]
CHECK = """
import json, sys
from pathlib import Path
from numlearn.rundirs import run_is_complete
root = Path(sys.argv[1])
runs = [p.parent for p in root.rglob("run.json")]
lines = [ln for g in root.rglob("generations.jsonl") for ln in g.read_text().split("\\n") if ln.strip()]
print("CHECK " + json.dumps({"complete": [run_is_complete(r) for r in runs],
                             "results": len(list(root.rglob("result.json"))),
                             "generation_lines": len(lines)}))
"""


def _bwrap_can_mount() -> bool:
    if shutil.which("bwrap") is None:
        return False
    r = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--size", "100000", "--tmpfs", "/mnt", "true"],
                       capture_output=True, timeout=30)
    return r.returncode == 0


pytestmark = pytest.mark.skipif(not _bwrap_can_mount(), reason="bubblewrap cannot mount a tmpfs here "
                                "(`make sandbox` installs it; the faults need a mount namespace)")


def _in_fault(fault: list[str], out: str, *cmd: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` with ``out`` replaced by the fault's mount, then the CHECK script on what it left."""
    script = " ".join(f"'{c}'" for c in cmd) + "; echo RC=$?; " + f"{sys.executable} -c '{CHECK}' {out}"
    return subprocess.run(["bwrap", "--dev-bind", "/", "/", *fault, "bash", "-c", script], capture_output=True,
                          text=True, cwd=REPO, timeout=600, env={**_env(), "HF_HUB_OFFLINE": "1"})


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "NUMLEARN_DEBUG"} | {"WANDB_MODE": "disabled"}


def _result(r) -> tuple[int, list[str], dict]:
    rc = int(r.stdout.split("RC=")[1].split()[0])
    check = json.loads(r.stdout.split("CHECK ")[1])
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln.lower() and not ln.startswith(("Writing", "Loading"))]
    return rc, errors, check


@pytest.mark.long  # the default tier's time (make test-distributed and CI run it)
def test_training_on_a_full_disk_is_one_line_and_not_complete(tmp_path):
    out = str(tmp_path / "out")
    # a small model whose first checkpoint's optimizer state overflows the disk: torch.save then says only
    # "[enforce fail at inline_container.cc] unexpected pos ...", which used to end in a traceback
    r = _in_fault(["--size", "300000", "--tmpfs", out], out, sys.executable, "-m", "numlearn.train", *SMALL,
                  "train.max_steps=10", "train.save_steps=5", f"paths.output_dir={out}",
                  f"paths.cache_dir={tmp_path}/cache")
    rc, errors, check = _result(r)
    assert rc == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert errors == [errors[-1]] and "no space left on the device" in errors[-1] and "re-run" in errors[-1], errors
    assert check["complete"] == [False], check  # a checkpoint or weights cut short are never the run's final


def test_training_into_a_read_only_dir_is_one_line(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    r = _in_fault(["--ro-bind", str(out), str(out)], str(out), sys.executable, "-m", "numlearn.train",
                  "train.max_steps=5", f"paths.output_dir={out}/runs")
    rc, errors, check = _result(r)
    assert rc == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(errors) == 1 and "read-only file system" in errors[0] and "paths.output_dir" in errors[0], errors
    assert check == {"complete": [], "results": 0, "generation_lines": 0}


def _evaluate(model: Path, out: str) -> list[str]:
    return [sys.executable, "-m", "numlearn.evaluate", f"model_path={model}", f"paths.output_dir={out}",
            f"eval_dir={out}/eval", f"paths.cache_dir={out}/cache", "eval.modes=[cot]", "eval.max_new_tokens_cap=24",
            "eval.benchmarks.synthetic_test.generator.n=200", "eval.benchmarks.synthetic_ood.generator.n=10"]


@pytest.mark.long  # the default tier's time (make test-distributed and CI run it)
def test_evaluation_on_a_full_disk_is_one_line_and_writes_no_result(saved_tiny_model, tmp_path):
    out = str(tmp_path / "out")
    r = _in_fault(["--size", "120000", "--tmpfs", out], out, *_evaluate(saved_tiny_model, out))
    rc, errors, check = _result(r)
    assert rc == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert errors == [errors[-1]] and "no space left on the device" in errors[-1], errors
    assert check["results"] == 0 and 0 < check["generation_lines"] < 200, check  # cut mid-way, nothing scored


def test_evaluation_into_a_read_only_dir_is_one_line(saved_tiny_model, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    r = _in_fault(["--ro-bind", str(out), str(out)], str(out), *_evaluate(saved_tiny_model, str(out / "x")))
    rc, errors, check = _result(r)
    assert rc == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(errors) == 1 and "read-only file system" in errors[0], errors
    assert check["results"] == 0
