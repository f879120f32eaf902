"""Prompt templates shared by training and evaluation (EVAL.md: the alpaca form)."""

from __future__ import annotations

import random

ALPACA = (
    "Below is an instruction that describes a task. Write a response that appropriately completes "
    "the request.\n\n### Instruction:\n{query}\n\n### Response:"
)
# The DEL/MAmmoTH training scripts draw one of several paraphrased templates per example. These
# keep the same "### Instruction/### Response" skeleton so evaluation prompts stay in-distribution.
ALPACA_VARIANTS = (
    ALPACA,
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n### Instruction:\n{query}\n\n### Response:",
    "Below is an instruction describing a task. Write a response that completes the request.\n\n"
    "### Instruction:\n{query}\n\n### Response:",
    "The following is an instruction for a task. Write a suitable response.\n\n### Instruction:\n{query}\n\n"
    "### Response:",
)
POT_SUFFIX = " Let's write a program."
MC_PRIMER = " Let's solve the multi-choice question step by step.\n"


def format_prompt(query: str, template: str = ALPACA) -> str:
    return template.format(query=query)


class TemplateSampler:
    """``mode="fixed"`` always uses the alpaca prompt; ``mode="random"`` draws a variant per example
    from a generator seeded with ``seed`` (never unseeded, so runs are reproducible)."""

    def __init__(self, mode: str = "fixed", seed: int = 0):
        if mode not in ("fixed", "random"):
            raise ValueError(f"prompt template mode {mode!r}; choose 'fixed' or 'random'")
        self.mode = mode
        self._rng = random.Random(f"numlearn-templates/{seed}")

    def __call__(self, query: str) -> str:
        if self.mode == "fixed":
            return format_prompt(query)
        return format_prompt(query, self._rng.choice(ALPACA_VARIANTS))


def template_phrases(template: str = ALPACA) -> tuple[str, ...]:
    """The constant pieces of a prompt template around ``{query}``, plus the PoT suffix."""
    head, tail = template.split("{query}")
    return head, tail, POT_SUFFIX
