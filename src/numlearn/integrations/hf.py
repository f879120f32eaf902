"""numlearn losses in the Hugging Face ``Trainer`` and its subclasses.

``NumlearnTrainerMixin`` (``class MyTrainer(NumlearnTrainerMixin, SomeTrainer)``) makes any
``transformers.Trainer`` subclass train a numlearn loss exactly: it counts the step's trained tokens
and digit targets over all accumulation micro-batches and processes before the step
(``get_batch_samples``), computes each micro-batch's loss as its share of the step's loss
(``compute_loss``), and normalises evaluation batches by their own counts. ``NumlearnTrainer`` is
the mixin on ``Trainer``; ``numlearn.integrations.trl.NumlearnSFTTrainer`` on TRL's ``SFTTrainer``.

``LossBridge`` adapts a loss to the model's outputs (logits, or hidden states for the fused linear
path) and keeps the logged means. Used alone as ``Trainer(compute_loss_func=LossBridge(loss))`` it
cannot see the step's digit count, so it refuses training steps larger than one micro-batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

try:
    from transformers import Trainer
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("numlearn.integrations.hf needs transformers and accelerate: pip install 'numlearn[hf]'") from e

from numlearn.losses import (
    LinearHead,
    LogitTransform,
    LossOutput,
    StepCounts,
    TokenLoss,
    count_digit_targets,
    count_targets,
    step_counts,
)
from numlearn.losses.base import _warn_once  # the losses' one warn-once registry

_WORKING_ROUTE = ("use numlearn.integrations.hf.NumlearnTrainer (or NumlearnTrainerMixin on your Trainer "
                  "subclass), numlearn.integrations.trl.NumlearnSFTTrainer for TRL, or call the loss in your own "
                  "loop with numlearn.losses.step_counts")


def logit_transform(model: torch.nn.Module) -> LogitTransform:
    """What ``model``'s head does to ``hidden @ W.T + b``: Granite's ``1 / logits_scaling``, Cohere's
    ``logit_scale``, Gemma-2/3's ``final_logit_softcapping`` (read off the text config)."""
    cfg = getattr(model, "config", None)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    scale = 1.0
    if getattr(cfg, "logits_scaling", None):  # Granite: logits / logits_scaling
        scale /= float(cfg.logits_scaling)
    mod_scale = getattr(model, "logit_scale", None)
    if isinstance(mod_scale, (int, float)):  # Cohere: logits * logit_scale (an attribute of the model)
        scale *= float(mod_scale)
    elif getattr(cfg, "logit_scale", None) is not None and isinstance(cfg.logit_scale, (int, float)):
        scale *= float(cfg.logit_scale)
    if getattr(cfg, "output_multiplier", None):
        scale *= float(cfg.output_multiplier)
    cap = getattr(cfg, "final_logit_softcapping", None)
    return LogitTransform(scale=scale, softcap=float(cap) if cap else None)


def linear_head(model: torch.nn.Module, **how) -> LinearHead:
    """``model``'s output layer as ``loss_fn.from_hidden(hidden, head, labels)`` takes it: the output embedding's
    weight and bias and ``logit_transform(model)``; ``how``: ``chunk_size``, ``grad_accumulation``, ``fused_chain``
    (``numlearn.losses.LinearHead``)."""
    out = model.get_output_embeddings()
    if out is None or not hasattr(out, "weight"):
        raise ValueError(f"{type(model).__name__} has no output embedding with a weight (get_output_embeddings()): "
                         "pass LinearHead(weight, bias, transform) yourself")
    return LinearHead(out.weight, getattr(out, "bias", None), logit_transform(model), **how)


# Packages whose patch replaces a causal LM's forward with one that computes a fused linear cross-entropy
# when given labels (and the full logits when not): Liger-Kernel (apply_liger_kernel_to_*), Unsloth.
FUSED_CE_PATCHERS = ("liger_kernel", "unsloth", "unsloth_zoo")


def fused_ce_patch(model: torch.nn.Module) -> str | None:
    """The package that patched ``model``'s forward with its own fused cross-entropy (``FUSED_CE_PATCHERS``;
    a class-level or instance-level patch, through a PEFT wrapper), else None."""
    seen = set()
    m = model
    while m is not None and id(m) not in seen:
        seen.add(id(m))
        for fwd in (getattr(m, "forward", None), getattr(type(m), "forward", None)):
            mod = getattr(getattr(fwd, "__func__", fwd), "__module__", "") or ""
            top = mod.split(".")[0]
            if top in FUSED_CE_PATCHERS:
                return top
        get_base = getattr(m, "get_base_model", None)
        m = get_base() if callable(get_base) else None
    return None


class LossBridge:
    """``compute_loss_func(outputs, labels, num_items_in_batch)`` for any numlearn loss.

    ``fused_linear=True`` (``train.fused_linear_loss``): the model is asked for the last position's
    logits only (``logits_to_keep=1``), a forward hook on the decoder keeps its final hidden states,
    and the loss is computed from them, the output embedding and the head's logit transform
    (``loss_fn.from_hidden``): the ``[B, T, V]`` logits are never formed. Call ``bind_model`` first.
    On the first call the transform is checked against the model's own last-position logits; a head
    that post-processes its logits in another way is refused.
    """

    def __init__(self, loss_fn: TokenLoss, fused_linear: bool = False, chunk_size: int | str = 1024) -> None:
        if fused_linear and not getattr(loss_fn, "has_linear_form", False):
            raise ValueError(f"train.fused_linear_loss=true needs a loss with a linear form (has_linear_form: "
                             f"from_hidden); {getattr(loss_fn, 'name', loss_fn)} works on full logits only")
        self.loss_fn = loss_fn
        self.fused_linear = bool(fused_linear)
        self.chunk_size = chunk_size if chunk_size == "auto" else int(chunk_size)  # auto: from H and V (linear.py)
        self.managed = False  # a NumlearnTrainerMixin supplies the step's counts
        self.in_training_step = False
        self.step_digits: int | None = None
        self.step_tokens: int | None = None
        self.step_examples: tuple[int | None, int | None] = (None, None)  # (with targets, with digit targets)
        self.microbatches_in_step: int = 1  # GA x processes, for aux_normalization=microbatch_mean
        self._sums: dict[str, float | torch.Tensor] = defaultdict(float)
        self._n = 0  # micro-batches since the last log
        self._steps = 0  # optimizer steps since the last log
        self._digits: int | None = None  # their global digit counts, summed (the same on every rank)
        self._head = None
        self._hidden = None
        self.transform: LogitTransform | None = None
        self._checked = False

    def bind_model(self, model: torch.nn.Module) -> None:
        if not self.fused_linear:
            patcher = fused_ce_patch(model)
            if patcher is not None:
                _warn_once(f"fused CE patch: {patcher}", f"{type(model).__name__}.forward is patched by {patcher} (its fused linear "
                               "cross-entropy): numlearn computes the loss itself, so the model is called without "
                               "labels and builds the full [B, T, V] logits -- the patch's memory saving is gone. Use "
                               "fused_linear=True (train.fused_linear_loss=true): numlearn's chunked head loss, the "
                               "same saving, with the numeric term; the patched forward serves it (logits_to_keep).")
            return
        if self._head is not None:
            return
        self._head = model.get_output_embeddings()
        if self._head is None or not hasattr(self._head, "weight"):
            raise ValueError(f"train.fused_linear_loss=true: {type(model).__name__} has no output embedding to "
                             "compute the loss from")
        if hasattr(self._head, "base_layer") or hasattr(self._head, "lora_A"):  # a PEFT adapter wraps the head
            raise ValueError(f"fused linear loss: {type(model).__name__}'s output head is wrapped by an adapter "
                             f"({type(self._head).__name__}, e.g. LoRA on lm_head): the fused path reads the base "
                             "weight only, so the adapter would get no gradient. Use fused_linear=False (the logits "
                             "path trains it), or leave lm_head out of the adapter's target_modules.")
        self.transform = logit_transform(model)
        self._model_name = type(model).__name__

        def keep(module, args, output):
            self._hidden = output[0] if isinstance(output, tuple) else output.last_hidden_state

        model.get_decoder().register_forward_hook(keep)

    def _check_transform(self, hidden, logits) -> None:
        """The model's last-position logits against ours from its hidden state (once)."""
        self._checked = True
        if logits is None or logits.shape[1] < 1:
            return
        with torch.no_grad():
            w, b = self._head.weight, getattr(self._head, "bias", None)
            h = hidden[:, -1].to(w.dtype)
            ours = self.transform((h @ w.t() + (b if b is not None else 0)).float())
            theirs = logits[:, -1].float()
            # loose enough for bf16 heads and TRL's patched head (1e-3 apart in fp32), far below what a
            # missing scale or cap does (a factor, or the cap's saturation)
            tol = 1e-3 + 2e-2 * float(theirs.abs().max())
            err = float((ours - theirs).abs().max())
        if err > tol:
            raise ValueError(f"fused linear loss: {self._model_name}'s logits are not {self.transform} of "
                             f"hidden @ lm_head (max difference {err:.3g}); its head post-processes logits in a way "
                             "numlearn does not reproduce. Set train.fused_linear_loss=false (the logits path).")

    def counts(self, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None,
               labels_shifted: bool = False) -> StepCounts:
        """The normalisers of this call: the step's (inside a managed training step), this batch's
        (evaluation), or -- used alone as ``compute_loss_func`` -- this batch's when it is the whole
        step, else refused."""
        if self.managed:
            if self.in_training_step:
                return StepCounts(self.step_tokens, self.step_digits, self.microbatches_in_step, *self.step_examples)
            return StepCounts(num_microbatches_in_step=1)
        fn = self.loss_fn
        needs_step = (getattr(fn, "has_numeric_term", False) and getattr(fn, "aux_normalization", "step") !=
                      "microbatch_sum") or getattr(fn, "ce_normalization", "token") != "token"
        if needs_step and torch.is_grad_enabled() and num_items_in_batch is not None:
            local = count_targets(labels, labels_shifted, getattr(fn, "ignore_index", -100))
            if int(num_items_in_batch) != local:
                raise ValueError(
                    f"LossBridge used as a plain compute_loss_func: the step has {int(num_items_in_batch)} trained "
                    f"tokens but this micro-batch {local} (gradient accumulation or several processes), and the "
                    f"numeric term's normaliser, the step's digit count, is not passed to compute_loss_func, so its "
                    f"weight would grow with the accumulation. {_WORKING_ROUTE}.")
        # the step is this micro-batch (checked above when it matters): its digit count is the step's
        vocab = getattr(fn, "vocab", None)
        digits = count_digit_targets(labels, vocab, labels_shifted, getattr(fn, "ignore_index", -100)) \
            if num_items_in_batch is not None and vocab is not None else None
        return StepCounts(num_items_in_batch, digits, 1)

    def compute(self, outputs: Any, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None,
                labels_shifted: bool = False, position_ids: torch.Tensor | None = None) -> LossOutput:
        # packed / padding-free rows (position_ids): an example is a sequence
        kw = {"step": self.counts(labels, num_items_in_batch, labels_shifted), "position_ids": position_ids}
        if self.fused_linear:
            if self._hidden is None:
                raise RuntimeError("fused linear loss: no hidden states captured (LossBridge.bind_model not called?)")
            hidden, self._hidden = self._hidden, None
            if not self._checked:
                self._check_transform(hidden, getattr(outputs, "logits", None))
            head = LinearHead(self._head.weight, getattr(self._head, "bias", None), self.transform, self.chunk_size)
            out = self.loss_fn.from_hidden(hidden, head, labels, labels_shifted=labels_shifted, **kw)
        else:
            out = self.loss_fn(outputs.logits, labels, labels_shifted=labels_shifted, **kw)
        if torch.is_grad_enabled():
            # summed on the device; read back once per logging step (pop_means), not per micro-batch (issue 45)
            self._sums["loss/ce"] += out.ce.detach().double()
            self._sums["loss/aux"] += out.aux.detach().double()
            for k in ("digit_acc", "digit_entropy", "digit_logit"):
                if k in out.stats:
                    self._sums[f"train/{k}"] += out.stats[k].detach().double()
            self._n += 1
        return out

    def __call__(self, outputs: Any, labels: torch.Tensor,
                 num_items_in_batch: int | torch.Tensor | None = None) -> torch.Tensor:
        return self.compute(outputs, labels, num_items_in_batch).loss

    def start_step(self, step_digits: int | None, step_tokens: int | None = None,
                   step_examples: tuple[int | None, int | None] = (None, None)) -> None:
        """Called once per optimizer step, before its micro-batches (``get_batch_samples``), with the
        step's digit targets, trained tokens and (examples with targets, examples with digit targets)."""
        self.step_digits = step_digits
        self.step_tokens = step_tokens
        self.step_examples = step_examples
        self._steps += 1
        if step_digits is not None:
            self._digits = (self._digits or 0) + step_digits

    def pop_means(self, all_reduce: Callable[[torch.Tensor], Any] | None = None) -> dict[str, float]:
        """Per-step means since the last call. ``loss/ce`` and ``loss/aux`` are each micro-batch's share of
        its step's loss (normalised by the step's totals), so they are summed over the step's
        micro-batches -- and over processes, through ``all_reduce`` (an in-place SUM over ranks) -- and
        averaged over steps: ``loss == loss/ce + loss/aux`` in every layout. Digit statistics are
        per-micro-batch means, averaged over all micro-batches of all processes."""
        keys = sorted(self._sums)
        share = [k for k in keys if k.startswith("loss/")]
        stats = [k for k in keys if k.startswith("train/")]
        vals = torch.tensor([float(self._sums[k]) for k in share + stats] + [float(self._n)], dtype=torch.float64)
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


class NumlearnTrainerMixin:
    """Put before a ``transformers.Trainer`` subclass: ``class T(NumlearnTrainerMixin, SFTTrainer)``.

    ``loss_bridge``: a ``LossBridge`` (or pass ``loss_fn=`` and optionally ``fused_linear=``,
    ``chunk_size=``). The loss is exact under accumulation and processes: each micro-batch is
    normalised by the step's trained tokens and digit targets (summed over micro-batches and
    processes), and the gradient averaging over processes is undone. Evaluation batches use their
    own counts. Logs ``loss/ce``, ``loss/aux``, ``train/digit_acc``, ``train/digit_entropy``.
    """

    def __init__(self, *args: Any, loss_bridge: LossBridge | None = None, loss_fn: TokenLoss | None = None,
                 fused_linear: bool = False, chunk_size: int | str = 1024, **kwargs: Any) -> None:
        if loss_bridge is None:
            if loss_fn is None:
                raise ValueError(f"{type(self).__name__} needs loss_fn= (numlearn.losses.build_loss(...)) or loss_bridge=")
            loss_bridge = LossBridge(loss_fn, fused_linear=fused_linear, chunk_size=chunk_size)
        if kwargs.get("compute_loss_func") is not None:
            raise ValueError(f"{type(self).__name__} computes the numlearn loss itself; drop compute_loss_func")
        self.loss_bridge = loss_bridge
        loss_bridge.managed = True
        super().__init__(*args, **kwargs)
        self.loss_is_scaled_for_ga = True  # each micro-batch's loss is its share of the step's
        loss_bridge.microbatches_in_step = self.args.gradient_accumulation_steps * max(self.args.world_size, 1)
        loss_bridge.bind_model(self.model)  # fused path: the head and the hidden-state hook (once)
        if self.args.fsdp and self.numlearn_strategy() != "fsdp":
            import warnings

            warnings.warn(f"{type(self).__name__}: FSDP was asked for but accelerate runs "
                          f"{self.numlearn_strategy()!r} (accelerate's choice, e.g. FSDP2 on CPU under your own "
                          "`accelerate launch`): the loss stays exact, the memory saving of sharding does not apply",
                          UserWarning, stacklevel=2)

    def numlearn_strategy(self) -> str:
        """What accelerate actually runs: ``"fsdp"``, ``"ddp"`` (MULTI_CPU / MULTI_GPU / ...), ``"single"``."""
        state = getattr(getattr(self, "accelerator", None), "state", None)
        kind = str(getattr(state, "distributed_type", "NO")).rsplit(".", 1)[-1].upper()
        return "fsdp" if kind == "FSDP" else "single" if kind == "NO" else "ddp"

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: torch.device | str | None
                          ) -> tuple[list[dict[str, Any]], int | torch.Tensor | None]:
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if batch_samples:
            # the step's counts on every process (moved to the device: NCCL reduces device tensors only)
            reduce = (lambda t: self.accelerator.reduce(t.to(device), reduction="sum")) if self.args.world_size > 1 \
                else (lambda t: t)
            c = step_counts(batch_samples, self.loss_bridge.loss_fn, all_reduce=reduce)
            has_vocab = getattr(self.loss_bridge.loss_fn, "vocab", None) is not None
            self.loss_bridge.start_step(c.num_digits_in_batch if has_vocab else None, c.num_items_in_batch,
                                        (c.num_examples_in_step, c.num_digit_examples_in_step if has_vocab else None))
        return batch_samples, num_items

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.loss_bridge.in_training_step = True
        try:
            return super().training_step(*args, **kwargs)
        finally:
            self.loss_bridge.in_training_step = False

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: int | torch.Tensor | None = None) -> Any:
        inputs = dict(inputs)
        labels, shifted = inputs.pop("labels", None), False
        if "shift_labels" in inputs:
            labels, shifted = inputs.pop("shift_labels"), True
        if labels is None:
            raise ValueError(f"{type(self).__name__}: the batch has no 'labels' (keys: {sorted(inputs)})")
        if self.loss_bridge.fused_linear:
            inputs["logits_to_keep"] = 1
        inputs.setdefault("use_cache", False)
        outputs = model(**inputs)
        loss = self.loss_bridge.compute(outputs, labels, labels_shifted=shifted,
                                        position_ids=inputs.get("position_ids")).loss
        if self.loss_bridge.in_training_step and self.args.world_size > 1:
            loss = loss * self.accelerator.num_processes  # DDP/FSDP average gradients; the counts are global
        return (loss, outputs) if return_outputs else loss

    def _sum_over_processes(self, t: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(t.to(self.args.device), reduction="sum").cpu()

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if "loss" in logs:
            # log() runs on every process (the Trainer gathers its own loss first), so a collective is safe here
            reduce = self._sum_over_processes if self.args.world_size > 1 else None
            logs = {**logs, **self.loss_bridge.pop_means(reduce)}
        super().log(logs, *args, **kwargs)


class NumlearnTrainer(NumlearnTrainerMixin, Trainer):
    """``transformers.Trainer`` training a numlearn loss exactly (see ``NumlearnTrainerMixin``)."""
