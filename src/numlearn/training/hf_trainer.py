"""Glue between numlearn losses and the Hugging Face ``Trainer``.

The loss enters through ``compute_loss_func`` (no Trainer internals are copied). Two small
overrides of public hooks add what the losses need:
* ``get_batch_samples`` also counts the digit targets of the whole optimizer step (all
  accumulation micro-batches, summed over processes), so ``aux_normalization=step`` is exact;
* ``log`` adds ``loss/ce``, ``loss/aux``, ``train/digit_acc`` and ``train/digit_entropy``, averaged
  over the micro-batches since the last log.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from numlearn.losses import count_digit_targets


class LossBridge:
    """``compute_loss_func(outputs, labels, num_items_in_batch)`` for any numlearn loss."""

    def __init__(self, loss_fn):
        self.loss_fn = loss_fn
        self.step_digits: int | None = None
        self.microbatches_in_step: int = 1  # GA x processes, for aux_normalization=microbatch_mean
        self._sums: dict[str, float] = defaultdict(float)
        self._n = 0

    def __call__(self, outputs, labels, num_items_in_batch=None):
        out = self.loss_fn(outputs.logits, labels, num_items_in_batch=num_items_in_batch,
                           num_digits_in_batch=self.step_digits,
                           num_microbatches_in_step=self.microbatches_in_step)
        if torch.is_grad_enabled():
            self._sums["loss/ce"] += float(out.ce)
            self._sums["loss/aux"] += float(out.aux)
            for k in ("digit_acc", "digit_entropy"):
                if k in out.stats:
                    self._sums[f"train/{k}"] += float(out.stats[k])
            self._n += 1
        return out.loss

    def pop_means(self) -> dict[str, float]:
        if not self._n:
            return {}
        means = {k: v / self._n for k, v in self._sums.items()}
        self._sums.clear()
        self._n = 0
        return means


class NumlearnTrainer(Trainer):
    def __init__(self, *args, loss_bridge: LossBridge, **kwargs):
        super().__init__(*args, compute_loss_func=loss_bridge, **kwargs)
        self.loss_bridge = loss_bridge
        loss_bridge.microbatches_in_step = self.args.gradient_accumulation_steps * max(self.args.world_size, 1)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        vocab = getattr(self.loss_bridge.loss_fn, "vocab", None)
        if vocab is not None and batch_samples:
            n = torch.tensor(sum(count_digit_targets(b["labels"], vocab) for b in batch_samples), device=device)
            if self.args.world_size > 1:
                n = self.accelerator.gather(n).sum()
            self.loss_bridge.step_digits = int(n)
        return batch_samples, num_items

    def log(self, logs, *args, **kwargs):
        if "loss" in logs:
            logs = {**logs, **self.loss_bridge.pop_means()}
        super().log(logs, *args, **kwargs)


class MetricsJSONL(TrainerCallback):
    """Appends every log record to ``metrics.jsonl`` (the run dir's source of truth)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.global_step, "epoch": state.epoch, **logs}) + "\n")


class ProgressPrinter(TrainerCallback):
    """One line per log when tqdm bars are off (non-interactive runs, CI logs)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            parts = [f"step {state.global_step}/{state.max_steps}"]
            for k in ("loss", "loss/ce", "loss/aux", "train/digit_acc", "learning_rate"):
                if k in logs:
                    parts.append(f"{k}={logs[k]:.4g}")
            print(" ".join(parts), flush=True)
