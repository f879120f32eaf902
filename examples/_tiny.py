"""A tokenizer and a model built locally (no hub): one token per character, digits "0".."9"."""

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXTS = ["12+345=357", "a 9.5 b", "7*8=56 ok", "x", "1000-1=999", "3.14 pi", "zz 42", "2024 year"]


def tokenizer():
    chars = list("0123456789.") + list("abcdefghijklmnopqrstuvwxyz ,=+-*$") + ["<eos>"]
    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(chars)}, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def model(vocab, seed=0):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))


def batch(tok, texts):
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    T = max(map(len, ids))
    out = {"input_ids": torch.full((len(ids), T), tok.pad_token_id), "labels": torch.full((len(ids), T), -100),
           "attention_mask": torch.zeros((len(ids), T), dtype=torch.long)}
    for i, x in enumerate(ids):
        out["input_ids"][i, : len(x)] = out["labels"][i, : len(x)] = torch.tensor(x)
        out["attention_mask"][i, : len(x)] = 1
    return out


def grads(m):
    return torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])
