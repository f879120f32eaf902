"""Tiny local stand-ins for tests, examples and tutorials: no hub, no download, seconds on a CPU.

``tokenizer()`` is one token per character with the digits "0".."9" as ids 0..9 and "." as 10 (what the
losses need: single-digit tokens); ``model(vocab)`` a one-layer Llama built from a config;
``batch(tok, texts)`` the usual unshifted causal-LM batch (labels -100 on padding); ``grads(model)`` its parameters' gradients, flattened. Needs ``numlearn[hf]`` (transformers,
which brings tokenizers)::

    from numlearn.testing import TEXTS, batch, model, tokenizer
    tok = tokenizer(); inputs = batch(tok, TEXTS); lm = model(len(tok))
"""

from __future__ import annotations

from typing import Any

import torch

TEXTS = ["12+345=357", "a 9.5 b", "7*8=56 ok", "x", "1000-1=999", "3.14 pi", "zz 42", "2024 year"]
CHARS = list("0123456789.") + list("abcdefghijklmnopqrstuvwxyz ,=+-*$") + ["<eos>"]


def tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` with one token per character of ``CHARS`` (``<eos>`` pads)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(CHARS)}, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def model(vocab: int, seed: int = 0, **config: Any) -> torch.nn.Module:
    """A one-layer ``LlamaForCausalLM`` (hidden 32) of ``vocab`` tokens, initialised from ``seed``; ``config``
    overrides ``LlamaConfig`` fields (e.g. ``tie_word_embeddings=True``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(LlamaConfig(**{**cfg, **config}))


def batch(tok: Any, texts: list[str]) -> dict[str, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and unshifted ``labels`` (the ids; the loss shifts them) of ``texts`` + EOS,
    right-padded; labels are -100 on padding."""
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    T = max(map(len, ids))
    out = {"input_ids": torch.full((len(ids), T), tok.pad_token_id), "labels": torch.full((len(ids), T), -100),
           "attention_mask": torch.zeros((len(ids), T), dtype=torch.long)}
    for i, x in enumerate(ids):
        out["input_ids"][i, : len(x)] = out["labels"][i, : len(x)] = torch.tensor(x)
        out["attention_mask"][i, : len(x)] = 1
    return out


def grads(m: torch.nn.Module) -> torch.Tensor:
    """The gradients of ``m``'s parameters that have one, flattened into one vector."""
    return torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])
