"""Hugging Face generation backend: batched greedy decoding with KV cache and left padding."""

from __future__ import annotations

import time

import torch

from .base import Backend, SamplingConfig, truncate_at_stop


class HFBackend(Backend):
    name = "hf"

    def __init__(self, model_path: str, tokenizer_path: str | None = None, dtype: str = "float32",
                 batch_size: int = 16, device: str | None = None, **_):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from numlearn.dtypes import resolve_dtype

        super().__init__()
        dt = resolve_dtype(dtype)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path or model_path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dt).to(self.device).eval()
        self.batch_size = int(batch_size)
        self.model_path, self.dtype = model_path, dtype

    def describe(self) -> dict:
        return {"backend": self.name, "model_path": str(self.model_path), "dtype": self.dtype,
                "batch_size": self.batch_size, "device": self.device}

    @torch.no_grad()
    def generate(self, prompts: list[str], sampling: SamplingConfig, progress=None) -> list[str]:
        from transformers import GenerationConfig

        if sampling.temperature != 0.0:
            raise ValueError("the hf backend implements greedy decoding only (temperature 0)")
        gen_cfg = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens, do_sample=False, num_beams=1,
            eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id,
            stop_strings=list(sampling.stop) or None, use_cache=True,
        )
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # similar lengths per batch
        out: list[str] = [""] * len(prompts)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            enc = self.tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True,
                                 add_special_tokens=True).to(self.device)
            t0 = time.perf_counter()
            gen = self.model.generate(**enc, generation_config=gen_cfg, tokenizer=self.tokenizer)
            new = gen[:, enc["input_ids"].shape[1] :]
            self._record(len(idx), int((new != self.tokenizer.pad_token_id).sum()), time.perf_counter() - t0)
            texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            for i, t in zip(idx, texts):
                out[i] = truncate_at_stop(t, sampling.stop)
            if progress is not None:
                progress(len(idx))
        return out
