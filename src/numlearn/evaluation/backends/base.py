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
