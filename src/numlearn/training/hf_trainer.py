"""The training module's Trainer: ``numlearn.integrations.hf.NumlearnTrainer`` (the step's counts
before each step, each micro-batch its share of the step's loss, evaluation on its own counts,
``loss/ce``, ``loss/aux`` and digit statistics logged), plus
* ``create_accelerator_and_postprocess`` promotes a multi-process CPU job with ``fsdp`` set to
  FSDP2 (accelerate would silently use DDP there), so the sharded path runs on CPU too.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from numlearn.integrations.hf import LossBridge, NumlearnTrainerMixin  # noqa: F401  (re-exported)
from numlearn.integrations.hf import NumlearnTrainer as _NumlearnTrainer

log = logging.getLogger("numlearn.train")  # the step lines the job console reads (jobs.Job.progress_note)


class NonFiniteStep(ValueError):
    """A training step whose loss or gradient norm is not finite: the run stops there, nothing is marked complete."""


class NumlearnTrainer(_NumlearnTrainer):
    """The library's ``NumlearnTrainer``, plus what the training module adds: the CPU FSDP2 promotion, and a stop
    at the first optimiser step whose loss (any of its micro-batches) or gradient norm is not finite -- before
    that step updates a weight, so no checkpoint or final model after it holds a diverged model. The check
    costs one host read per optimiser step, where the gradient norm is already computed (clipping)."""

    _step_finite = None  # this optimiser step's micro-batch losses all finite (a device tensor: no host read)

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        ok = torch.isfinite(loss.detach()).all()
        self._step_finite = ok if self._step_finite is None else self._step_finite & ok
        return loss

    def _get_grad_norm(self, model, grad_norm=None):
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        losses_ok, self._step_finite = self._step_finite, None
        norm = torch.as_tensor(grad_norm if grad_norm is not None else 0.0, dtype=torch.float32)
        if not bool(torch.isfinite(norm).all()) or (losses_ok is not None and not bool(losses_ok.cpu())):
            what = "loss" if losses_ok is not None and not bool(losses_ok.cpu()) else "gradient norm"
            raise NonFiniteStep(
                f"step {self.state.global_step + 1}: the training {what} is not finite (gradient norm "
                f"{float(norm):g}, learning rate {self.args.learning_rate:g}): the run stopped before this step "
                "updated the weights and is not complete; lower train.learning_rate (or raise train.warmup_ratio, "
                "set train.max_grad_norm) and re-run with force=true")
        return grad_norm

    def _issue_warnings_after_load(self, load_result) -> None:
        """A resumed checkpoint of a model with a tied head has no ``lm_head.weight`` (it is the embedding, saved
        once): transformers warned of a missing key on every resume. The head is tied again and nothing is said;
        any other missing or unexpected key is still warned about."""
        tied = self.tied_head_keys()
        missing = [k for k in load_result.missing_keys if k not in tied]
        if tied and len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
            load_result = type(load_result)(missing_keys=missing, unexpected_keys=load_result.unexpected_keys)
        super()._issue_warnings_after_load(load_result)

    def tied_head_keys(self) -> set[str]:
        """The output head's parameter names where it is tied to the input embedding (empty otherwise)."""
        m = self.model
        out, inp = getattr(m, "get_output_embeddings", lambda: None)(), getattr(m, "get_input_embeddings", lambda: None)()
        if out is None or inp is None or out.weight is not inp.weight:
            return set()
        return {n for n, p in m.named_parameters(remove_duplicate=False) if p is out.weight and n != next(
            (k for k, q in m.named_parameters() if q is inp.weight), None)}

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
    """One line per log when tqdm bars are off (non-interactive runs, CI logs); the last step is
    always logged, so a run shorter than ``logging_steps`` (or not a multiple of it) still reports
    where it ended."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.max_steps and state.global_step >= state.max_steps and args.logging_steps \
                and state.global_step % int(args.logging_steps):
            control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            parts = [f"step {state.global_step}/{state.max_steps}"]
            for k in ("loss", "loss/ce", "loss/aux", "train/digit_acc", "learning_rate"):
                if k in logs:
                    parts.append(f"{k}={logs[k]:.4g}")
            log.info(" ".join(parts))


def wandb_callback():
    """Hugging Face's ``WandbCallback`` without the double prefix: it prefixes every training key with
    ``train/``, so numlearn's own ``train/digit_acc`` arrived as ``train/train/digit_acc``. Keys already
    under ``train/`` lose that prefix first (``train/digit_acc`` stays ``train/digit_acc``, ``loss/ce``
    becomes ``train/loss/ce``). Imported lazily: wandb is an extra."""
    from transformers.integrations import WandbCallback

    class NumlearnWandbCallback(WandbCallback):
        def on_log(self, args, state, control, model=None, logs=None, **kwargs):
            logs = {(k[len("train/"):] if k.startswith("train/") else k): v for k, v in (logs or {}).items()}
            return super().on_log(args, state, control, model=model, logs=logs, **kwargs)

    return NumlearnWandbCallback
