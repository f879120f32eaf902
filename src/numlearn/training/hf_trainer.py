"""Glue between numlearn losses and the Hugging Face ``Trainer``.

The loss enters through ``compute_loss_func`` (no Trainer internals are copied). Two small
overrides of public hooks add what the losses need:
* ``get_batch_samples`` also counts the digit targets of the whole optimizer step (all
  accumulation micro-batches, summed over processes), so ``aux_normalization=step`` is exact;
* ``log`` adds ``loss/ce`` and ``loss/aux`` (the step's, summed over its micro-batches and
  processes, so ``loss = loss/ce + loss/aux``), ``train/digit_acc``, ``train/digit_entropy`` and
  ``train/step_digits``, averaged over the steps since the last log;
* ``create_accelerator_and_postprocess`` promotes a multi-process CPU job with ``fsdp`` set to
  FSDP2 (accelerate would silently use DDP there), so the sharded path runs on CPU too.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from numlearn.losses import count_digit_targets


class LossBridge:
    """``compute_loss_func(outputs, labels, num_items_in_batch)`` for any numlearn loss.

    ``fused_linear=True`` (``train.fused_linear_loss``): the model is asked for the last position's
    logits only (the collator adds ``logits_to_keep=1``), a forward hook on the decoder keeps its
    final hidden states, and the loss is computed from them and the output embedding
    (``loss_fn.from_hidden``): the ``[B, T, V]`` logits are never formed. Call ``bind_model`` first.
    """

    def __init__(self, loss_fn, fused_linear: bool = False, chunk_size: int = 1024):
        if fused_linear and not hasattr(loss_fn, "from_hidden"):
            raise ValueError(f"train.fused_linear_loss=true needs a loss with a linear form (mle, ntl, dist2, del); "
                             f"{getattr(loss_fn, 'name', loss_fn)} works on full logits only")
        self.loss_fn = loss_fn
        self.fused_linear, self.chunk_size = bool(fused_linear), int(chunk_size)
        self.step_digits: int | None = None
        self.microbatches_in_step: int = 1  # GA x processes, for aux_normalization=microbatch_mean
        self._sums: dict[str, float] = defaultdict(float)
        self._n = 0  # micro-batches since the last log
        self._steps = 0  # optimizer steps since the last log
        self._digits: int | None = None  # their global digit counts, summed (the same on every rank)
        self._head = None
        self._hidden = None

    def bind_model(self, model) -> None:
        if not self.fused_linear:
            return
        self._head = model.get_output_embeddings()
        if self._head is None or not hasattr(self._head, "weight"):
            raise ValueError(f"train.fused_linear_loss=true: {type(model).__name__} has no output embedding to "
                             "compute the loss from")

        def keep(module, args, output):
            self._hidden = output[0] if isinstance(output, tuple) else output.last_hidden_state

        model.get_decoder().register_forward_hook(keep)

    def __call__(self, outputs, labels, num_items_in_batch=None):
        kw = {"num_items_in_batch": num_items_in_batch, "num_digits_in_batch": self.step_digits,
              "num_microbatches_in_step": self.microbatches_in_step}
        if self.fused_linear:
            if self._hidden is None:
                raise RuntimeError("fused linear loss: no hidden states captured (LossBridge.bind_model not called?)")
            hidden, self._hidden = self._hidden, None
            out = self.loss_fn.from_hidden(hidden, self._head.weight, labels, getattr(self._head, "bias", None),
                                           chunk_size=self.chunk_size, **kw)
        else:
            out = self.loss_fn(outputs.logits, labels, **kw)
        if torch.is_grad_enabled():
            self._sums["loss/ce"] += float(out.ce)
            self._sums["loss/aux"] += float(out.aux)
            for k in ("digit_acc", "digit_entropy"):
                if k in out.stats:
                    self._sums[f"train/{k}"] += float(out.stats[k])
            self._n += 1
        return out.loss

    def start_step(self, step_digits: int | None) -> None:
        """Called once per optimizer step, before its micro-batches (``get_batch_samples``)."""
        self.step_digits = step_digits
        self._steps += 1
        if step_digits is not None:
            self._digits = (self._digits or 0) + step_digits

    def pop_means(self, all_reduce=None) -> dict[str, float]:
        """Per-step means since the last call. ``loss/ce`` and ``loss/aux`` are each micro-batch's share of
        its step's loss (normalised by the step's totals), so they are summed over the step's
        micro-batches -- and over processes, through ``all_reduce`` (an in-place SUM over ranks) -- and
        averaged over steps: ``loss == loss/ce + loss/aux`` in every layout. Digit statistics are
        per-micro-batch means, averaged over all micro-batches of all processes."""
        keys = sorted(self._sums)
        share = [k for k in keys if k.startswith("loss/")]
        stats = [k for k in keys if k.startswith("train/")]
        vals = torch.tensor([self._sums[k] for k in share + stats] + [float(self._n)], dtype=torch.float64)
        if all_reduce is not None:
            vals = all_reduce(vals)
        n_micro, steps = float(vals[-1]), self._steps
        means = {k: float(v) / steps for k, v in zip(share, vals[: len(share)])} if steps else {}
        if n_micro:
            means.update({k: float(v) / n_micro for k, v in zip(stats, vals[len(share) : -1])})
        if steps and self._digits is not None:
            means["train/step_digits"] = self._digits / steps
        self._sums.clear()
        self._n = self._steps = 0
        self._digits = None
        return means


class NumlearnTrainer(Trainer):
    def __init__(self, *args, loss_bridge: LossBridge, **kwargs):
        super().__init__(*args, compute_loss_func=loss_bridge, **kwargs)
        self.loss_bridge = loss_bridge
        loss_bridge.microbatches_in_step = self.args.gradient_accumulation_steps * max(self.args.world_size, 1)

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        from accelerate.state import PartialState
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

        state = self.accelerator.state
        if self.args.fsdp_plugin_args and not self.is_fsdp_enabled and state.distributed_type == DistributedType.MULTI_CPU:
            # accelerate enables its FSDP plugin for accelerator devices only: CPU processes would
            # silently get DDP. FSDP2 shards over gloo, so the GPU path (sharded wrap, full-state
            # saves, sharded checkpoints and resume) is promoted to run here as well.
            state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
            state.distributed_type = DistributedType.FSDP
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP  # as AcceleratorState does on GPUs
            self.is_fsdp_enabled = True

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        vocab = getattr(self.loss_bridge.loss_fn, "vocab", None)
        step_digits = None
        if vocab is not None and batch_samples:
            n = torch.tensor(sum(count_digit_targets(b["labels"], vocab) for b in batch_samples), device=device)
            if self.args.world_size > 1:
                n = self.accelerator.gather(n).sum()  # the step's digit targets on every process
            step_digits = int(n)
        if batch_samples:
            self.loss_bridge.start_step(step_digits)
        return batch_samples, num_items

    def _sum_over_processes(self, t: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(t.to(self.args.device), reduction="sum").cpu()

    def log(self, logs, *args, **kwargs):
        if "loss" in logs:
            # log() runs on every process (the Trainer gathers its own loss first), so a collective is safe here
            reduce = self._sum_over_processes if self.args.world_size > 1 else None
            logs = {**logs, **self.loss_bridge.pop_means(reduce)}
        super().log(logs, *args, **kwargs)


class MetricsJSONL(TrainerCallback):
    """Appends every log record to ``metrics.jsonl`` (the run dir's source of truth)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.global_step, "epoch": state.epoch, "time": round(time.time(), 3),
                                    **logs}) + "\n")


class ProgressPrinter(TrainerCallback):
    """One line per log when tqdm bars are off (non-interactive runs, CI logs)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            parts = [f"step {state.global_step}/{state.max_steps}"]
            for k in ("loss", "loss/ce", "loss/aux", "train/digit_acc", "learning_rate"):
                if k in logs:
                    parts.append(f"{k}={logs[k]:.4g}")
            print(" ".join(parts), flush=True)
