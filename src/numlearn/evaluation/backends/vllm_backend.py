"""vLLM backend. ``vllm`` is an optional extra and is imported here only, when chosen."""

from __future__ import annotations

import time

from .base import Backend, SamplingConfig, truncate_at_stop


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, model_path: str, dtype: str = "bfloat16", tensor_parallel_size: int = 1,
                 max_model_len: int = 4096, seed: int = 0, enforce_eager: bool = False,
                 gpu_memory_utilization: float = 0.9, **_):
        """The engine of ``model_path`` (a run's ``final`` directory or a hub id, its tokenizer beside it);
        the keywords the HF backend takes (``batch_size``, ``device``) are ignored: vLLM batches itself."""
        try:
            from vllm import LLM
        except ImportError as e:
            raise ImportError("eval.backend=vllm needs vLLM: pip install -e '.[vllm]' on a GPU machine "
                              "(or the CPU build, see `make test-vllm`); eval.backend=hf runs anywhere") from e
        super().__init__()
        kwargs = dict(model=str(model_path), tokenizer=str(model_path), dtype=dtype,
                      tensor_parallel_size=int(tensor_parallel_size), max_model_len=int(max_model_len),
                      seed=int(seed), enforce_eager=bool(enforce_eager), generation_config="vllm")
        try:
            import torch

            if torch.cuda.is_available():
                kwargs["gpu_memory_utilization"] = float(gpu_memory_utilization)
        except ImportError:  # pragma: no cover
            pass
        self.llm = LLM(**kwargs)
        self.model_path, self.dtype, self.tp = model_path, dtype, tensor_parallel_size

    def close(self) -> None:
        """Shut the engine down and release its GPU memory (the teacher-forced pass loads the model after it)."""
        import gc

        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if callable(getattr(core, "shutdown", None)):
            core.shutdown()
        del llm, core
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:  # an older or newer vLLM: the engine is down; torch frees what it cached
            cleanup_dist_env_and_memory = None
        if cleanup_dist_env_and_memory is not None:
            cleanup_dist_env_and_memory()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def describe(self) -> dict:
        import vllm

        return {"backend": self.name, "model_path": str(self.model_path), "dtype": self.dtype,
                "tensor_parallel_size": self.tp, "vllm": vllm.__version__}

    def generate(self, prompts: list[str], sampling: SamplingConfig, progress=None) -> list[str]:
        from vllm import SamplingParams

        sp = SamplingParams(temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                            max_tokens=int(sampling.max_new_tokens), stop=list(sampling.stop) or None, seed=0)
        t0 = time.perf_counter()
        outs = self.llm.generate(prompts, sp, use_tqdm=False)
        self._record(len(prompts), sum(len(o.outputs[0].token_ids) for o in outs), time.perf_counter() - t0)
        texts = [truncate_at_stop(o.outputs[0].text, sampling.stop) for o in outs]
        if progress is not None:
            progress(len(prompts))
        return texts
