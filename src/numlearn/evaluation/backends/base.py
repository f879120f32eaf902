"""The backend interface."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class SamplingConfig:
    """Explicit sampling parameters; a model's generation_config defaults are never used."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str
    sampling: SamplingConfig


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """Cut a completion at the earliest stop string (the stop string itself is removed)."""
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i)
    return text[:cut]


class Backend:
    """``stats``: what this backend has generated so far (tokens after the prompt, cut where decoding
    stopped; padding not counted) and the seconds spent in ``generate``, for throughput reports."""

    name = "base"

    def __init__(self):
        self.stats = {"prompts": 0, "generated_tokens": 0, "generate_seconds": 0.0}

    def _record(self, n_prompts: int, n_tokens: int, seconds: float) -> None:
        self.stats["prompts"] += int(n_prompts)
        self.stats["generated_tokens"] += int(n_tokens)
        self.stats["generate_seconds"] += float(seconds)

    def generate(self, prompts: list[str], sampling: SamplingConfig) -> list[str]:
        """Completions (text after the prompt, cut at the first stop string), one per prompt."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        """Release what the backend holds (a vLLM engine's GPU memory); nothing to release by default."""


class GreedyReuse:
    """A backend that generates a greedy (prompt, sampling) pair once per process.

    Greedy decoding is a function of the prompt and the sampling parameters, and the modes share prompts: mode
    ``paper``'s first attempt on an open set is mode ``pot``'s prompt and its CoT backup is mode ``cot``'s. An
    evaluation of ``[cot, pot, paper]`` therefore generates each such prompt once and records the other use as
    reused (``stats["reused_completions"]``, copied into each result's ``generation``). Sampling with a
    temperature is never reused. A resumed line's completions are remembered too (``remember``). Everything else (``name``, ``describe()``, an hf backend's ``model``) is the
    wrapped backend's."""

    def __init__(self, inner: Backend):
        self.inner = inner
        self.reused = 0
        self._memo: dict[tuple, str] = {}

    def __getattr__(self, attr: str):
        return getattr(self.inner, attr)

    @property
    def stats(self) -> dict:
        return {**(getattr(self.inner, "stats", None) or {}), "reused_completions": self.reused}

    def remember(self, prompt: str, sampling: SamplingConfig, completion: str) -> None:
        """A completion generated before (a resumed line of this model and sampling), kept for reuse."""
        if sampling.temperature == 0:
            self._memo.setdefault((prompt, sampling), completion)

    def generate(self, prompts: list[str], sampling: SamplingConfig) -> list[str]:
        if sampling.temperature != 0:
            return self.inner.generate(prompts, sampling)
        keys = [(p, sampling) for p in prompts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._memo))
        if missing:
            for k, completion in zip(missing, self.inner.generate([p for p, _ in missing], sampling)):
                self._memo[k] = completion
        self.reused += len(keys) - len(missing)
        return [self._memo[k] for k in keys]
