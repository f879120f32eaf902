"""Every config file composes; bad choices and a missing data root give one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
GROUPS = ["model", "loss", "data", "train", "eval", "logger", "paths", "experiment"]


def _all_overrides():
    for g in GROUPS:
        for f in sorted((CONF / g).glob("*.yaml")):
            yield f"{g}={f.stem}"
    for f in sorted((CONF / "eval" / "benchmark").glob("*.yaml")):
        yield f"+eval/benchmark@bench={f.stem}"


@pytest.mark.parametrize("override", list(_all_overrides()))
def test_every_config_composes(override):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        for primary in ("config", "evaluate"):
            cfg = compose(primary, overrides=[override])
            OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
            assert cfg.run_dir.count("/") >= 4


def test_hydra_launcher_configs_need_plugin():
    files = sorted((CONF / "hydra" / "launcher").glob("*.yaml"))
    assert files, "SLURM launcher configs are missing"
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra-submitit-launcher not installed (pip install -e '.[slurm]')")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        for f in files:
            compose("config", overrides=[f"hydra/launcher={f.stem}"], return_hydra_config=True)


def test_run_dir_is_named_from_model_loss_alpha_seed():
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=["experiment=table1_tiny", "loss=del", "seed=3"])
    assert cfg.run_dir.endswith("outputs/table1_tiny/tiny/del/alpha=0.01/seed=3")


def test_each_experiment_file_opens_with_its_command():
    for f in sorted((CONF / "experiment").glob("*.yaml")):
        head = f.read_text().splitlines()[:12]
        assert head[0] == "# @package _global_", f
        assert any("numlearn." in line or "make " in line for line in head if line.startswith("#")), f


def _run(args, **kw):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=REPO, timeout=120, **kw)


def test_unknown_group_choice_is_one_line():
    r = _run(["numlearn.train", "loss=nope"])
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "unknown loss 'nope'" in lines[0] and "del" in lines[0] and "mle" in lines[0]


def test_missing_data_root_is_one_line(tmp_path):
    import os

    env = {**os.environ, "NUMLEARN_DATA_DIR": str(tmp_path / "nowhere")}
    r = _run(["numlearn.evaluate", "eval=paper", "model_path=gpt2"], env=env)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "nowhere" in lines[0] and "paths.data_dir" in lines[0]
