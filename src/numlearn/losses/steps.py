"""The step's counts for your own training loop: what a step-normalised loss divides by.

A numeric loss with ``aux_normalization="step"`` is exact -- the same objective as one big batch, at
any accumulation and any number of processes -- when every micro-batch's call gets the *whole
step's* counts: trained tokens (``num_items_in_batch``) and digit targets (``num_digits_in_batch``),
summed over the step's micro-batches and over processes. ``step_counts`` computes both.

Then the loss of each micro-batch is already its share of the step's mean. What remains is the
backward's scaling, which depends on the loop (``backward_scale``):

* a plain loop on one process: ``loss.backward()`` as is;
* ``accelerate``: ``accelerator.backward(loss)`` divides by ``gradient_accumulation_steps`` (when
  the Accelerator was built with it), and DDP/FSDP *average* gradients over processes; multiply the
  loss by ``backward_scale(accelerator)`` = GA x processes first. See ``examples/accelerate_loop.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

from .spans import IGNORE_INDEX, distinct_examples, example_ids, to_targets

if TYPE_CHECKING:  # (not base: base reads StepCounts from here)
    from .digits import DigitVocab


@dataclass(frozen=True)
class StepCounts:
    """Counts of one optimizer step, over all its micro-batches and processes: pass it to every micro-batch's
    loss call, ``loss_fn(logits, labels, step=counts)`` (with the micro-batch's ``position_ids`` for packed rows).

    num_items_in_batch: trained tokens; num_digits_in_batch: digit targets; num_microbatches_in_step:
    GA x processes; num_examples_in_step / num_digit_examples_in_step: examples (sequences) with a
    trained target / with a digit target (the ``example_mean`` normalisations). A field left None is the
    called batch's own count (``StepCounts()``: the batch is the step)."""

    num_items_in_batch: int | torch.Tensor | None = None
    num_digits_in_batch: int | None = None
    num_microbatches_in_step: int | None = None
    num_examples_in_step: int | None = None
    num_digit_examples_in_step: int | None = None

    def as_kwargs(self) -> dict[str, int | None]:
        """The five counts as keywords (the deprecated call form; pass ``step=self`` instead)."""
        return {f: getattr(self, f) for f in STEP_FIELDS}


STEP_FIELDS = tuple(f.name for f in fields(StepCounts))


def _labels_of(batch, labels_shifted: bool) -> tuple[torch.Tensor, bool]:
    """(labels, whether they are shifted): a dict's ``shift_labels`` (already shifted) win over its
    ``labels``, as in Hugging Face's collators."""
    if isinstance(batch, torch.Tensor):
        return batch, labels_shifted
    if isinstance(batch, Mapping):
        if "shift_labels" in batch:
            return batch["shift_labels"], True
        if "labels" in batch:
            return batch["labels"], labels_shifted
        raise ValueError(f"step_counts: a micro-batch has no 'labels' (keys: {sorted(batch)}); pass the labels "
                         "tensors, or batches with a 'labels' entry")
    raise ValueError(f"step_counts: expected label tensors or dict batches, got {type(batch).__name__}")


def step_counts(micro_batches: Iterable, loss_fn: Any = None, *, vocab: DigitVocab | None = None,
                labels_shifted: bool = False,
                all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> StepCounts:
    """Trained tokens and digit targets of one optimizer step.

    micro_batches: this process's micro-batches of the step (label tensors ``[B, T]``, or dicts with
        ``"labels"``, or ``"shift_labels"``, and ``"position_ids"`` for packed rows); unshifted labels
        unless ``labels_shifted``.
    loss_fn: a numlearn loss (its digit vocabulary is used); or pass ``vocab`` (a ``DigitVocab``).
    all_reduce: ``fn(tensor) -> tensor`` summing over processes (e.g. ``accelerator.reduce(t,
        "sum")``); None -> ``torch.distributed.all_reduce`` when a process group is initialised,
        else this process only.
    """
    if vocab is None and loss_fn is not None:
        vocab = getattr(loss_fn, "vocab", None)
    ign = getattr(loss_fn, "ignore_index", IGNORE_INDEX)  # the loss's label of untrained positions besides -100
    micro_batches = list(micro_batches)
    batches = [_labels_of(b, labels_shifted) for b in micro_batches]
    if not batches:
        raise ValueError("step_counts: the step has no micro-batch")
    positions = [b.get("position_ids") if isinstance(b, Mapping) else None for b in micro_batches]
    # every count a tensor on the labels' device, summed there: one read back per step (the .tolist() below),
    # not several per micro-batch (issue 45)
    device = batches[0][0].device
    t = torch.zeros(5, dtype=torch.long, device=device)
    t[2] = len(batches)
    for (b, shifted), pos in zip(batches, positions):
        targets = to_targets(b.to(device), shifted, ign)
        trained = targets != IGNORE_INDEX
        digit = vocab.digit_counts(targets) if vocab is not None else torch.zeros_like(targets)
        ex = example_ids(targets, pos)
        t[0] += trained.sum()
        t[1] += digit.sum()
        t[3] += distinct_examples(ex, trained)
        t[4] += distinct_examples(ex, digit > 0)
    dist = torch.distributed
    if all_reduce is not None:
        t = all_reduce(t)
    elif dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
    tokens, digits, micro, examples, digit_examples = (int(x) for x in t.tolist())  # micro: GA x processes
    return StepCounts(tokens, digits, micro, examples, digit_examples)


def backward_scale(accelerator: Any = None, *, grad_accum: int = 1, world_size: int = 1) -> float:
    """What to multiply a step-normalised loss by before the backward, so that the summed (and
    process-averaged) gradient is the gradient of the step's loss: GA x processes under accelerate
    (``accelerator.backward`` divides by GA; DDP/FSDP average over processes), or
    ``grad_accum`` x ``world_size`` for a loop that divides itself. 1 for a plain loop that calls
    ``loss.backward()`` per micro-batch on one process."""
    if accelerator is not None:
        return float(accelerator.gradient_accumulation_steps * accelerator.num_processes)
    return float(grad_accum * world_size)
