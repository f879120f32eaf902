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
    name = "base"

    def generate(self, prompts: list[str], sampling: SamplingConfig) -> list[str]:
        """Completions (text after the prompt, cut at the first stop string), one per prompt."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.name}
