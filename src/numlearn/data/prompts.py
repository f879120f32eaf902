"""Prompt templates shared by training and evaluation.

Evaluation always uses the alpaca form (the official ``eval/prompt_utils.py``). Training offers:

* ``alpaca`` -- the same alpaca prompt for every example (the embedded default);
* ``official`` -- the DEL authors' template set (``utils.PROMPT_TEMPLATE`` of PolyU-VCLab/DEL,
  Apache-2.0, shipped as ``official_prompt_templates.json``). Their trainers call
  ``random.choice(PROMPT_TEMPLATE)`` in every torchrun process before anything is seeded, so each
  rank formats its shard with its own template (on 4 GPUs all four agree with probability 0.0006).
  ``draw="rank"`` does the same from a generator seeded by (seed, rank); ``draw="run"`` draws one
  template for every rank from the seed. Either way the draws are reproducible and every rank's
  is recorded in ``run.json`` (``templates``). A record with a non-empty ``input`` field gets the
  template's ``prompt_input`` form.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ALPACA = (
    "Below is an instruction that describes a task. Write a response that appropriately completes "
    "the request.\n\n### Instruction:\n{query}\n\n### Response:"
)
POT_SUFFIX = " Let's write a program."
MC_PRIMER = " Let's solve the multi-choice question step by step.\n"
TEMPLATE_MODES = ("alpaca", "official")
_OFFICIAL_FILE = Path(__file__).with_name("official_prompt_templates.json")


def format_prompt(query: str, template: str = ALPACA) -> str:
    return template.format(query=query)


@lru_cache(maxsize=1)
def official_templates() -> tuple[dict, ...]:
    """The authors' twelve ``{"prompt_input", "prompt_no_input"}`` templates, in their order."""
    return tuple(json.loads(_OFFICIAL_FILE.read_text(encoding="utf-8"))["PROMPT_TEMPLATE"])


@dataclass(frozen=True)
class TrainingTemplate:
    """The prompt every training example of a run is formatted with."""

    mode: str
    index: int | None  # position in the official list; None for alpaca
    no_input: str      # fields {instruction}
    with_input: str    # fields {instruction}, {input}

    def __call__(self, instruction: str, input_text: str = "") -> str:
        if input_text:
            return self.with_input.format(instruction=instruction, input=input_text)
        return self.no_input.format(instruction=instruction)

    def describe(self) -> dict:
        return {"mode": self.mode, "official_index": self.index, "prompt_no_input": self.no_input}


TEMPLATE_DRAWS = ("run", "rank")


def training_template(mode: str = "alpaca", seed: int = 0, rank: int | None = None) -> TrainingTemplate:
    """The template a process formats its examples with: ``alpaca`` always the same; ``official``
    one of the authors' set drawn from ``random.Random(f"numlearn-templates/{seed}")`` (rank None:
    the same for every rank) or ``random.Random(f"numlearn-templates/{seed}/rank{rank}")`` (a draw
    per rank); string seeds are stable across Python versions."""
    if mode == "random":
        raise ValueError("data.template=random was replaced by data.template=official (the authors' own "
                         "template set, one drawn per run)")
    if mode not in TEMPLATE_MODES:
        raise ValueError(f"data.template={mode!r}; choose one of {TEMPLATE_MODES}")
    if mode == "alpaca":
        alpaca = ALPACA.replace("{query}", "{instruction}")
        return TrainingTemplate("alpaca", None, alpaca, alpaca)
    templates = official_templates()
    key = f"numlearn-templates/{seed}" if rank is None else f"numlearn-templates/{seed}/rank{int(rank)}"
    i = random.Random(key).randrange(len(templates))
    t = templates[i]
    return TrainingTemplate("official", i, t["prompt_no_input"], t["prompt_input"])


def template_phrases(template: str = ALPACA) -> tuple[str, ...]:
    """The constant pieces of a prompt template around ``{query}``, plus the PoT suffix."""
    head, tail = template.split("{query}")
    return head, tail, POT_SUFFIX
