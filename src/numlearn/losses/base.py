"""Shared machinery: the loss output, cross-entropy fused with the digit-logit gather, and the
normalisation of the numeric term.

Tensor shapes used throughout: ``B`` batch, ``T`` sequence, ``V`` vocabulary, ``M = B*T`` flat
positions, ``N`` digit target positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .digits import DigitVocab
from .linear import LinearHead, linear_ce_and_digit_logits
from .numbers import NumberVocab
from .spans import IGNORE_INDEX, DigitTargets, example_id_bound, example_ids, per_example_weights, to_targets
from .steps import STEP_FIELDS, StepCounts

# How the numeric term of one micro-batch is normalised; ``alpha`` means a different thing under each.
AUX_NORMALIZATIONS = {
    # alpha is the weight relative to the step's digit-target mean, on any number of processes and
    # any accumulation: the same number is the same objective on 1 CPU or 64 GPUs.
    "step": "term summed over this micro-batch / digit targets of the whole step (all micro-batches, all processes)",
    # train-qwen-deepseek.py (transformers 4.57, compute_loss_func): a per-micro-batch mean that the
    # Trainer sums over accumulation steps and (loss x processes, gradients averaged) over processes.
    "microbatch_sum": "per-micro-batch mean, summed over the step's GA x W micro-batches (official Qwen/DeepSeek script)",
    # train-codellama-mistral.py (transformers 4.35): accelerate divides by GA, DDP/FSDP averages processes.
    "microbatch_mean": "per-micro-batch mean, averaged over the step's GA x W micro-batches (official CodeLlama/Mistral script)",
    # The official scripts at their per-device batch of 1, made invariant to GA x W: each example's
    # digit mean counts equally (the paper presets' default).
    "example_mean": "each example's digit mean, averaged over the step's examples that have digit targets (all micro-batches, all processes)",
}
# How cross-entropy is normalised.
CE_NORMALIZATIONS = {
    "token": "summed over the micro-batch / trained tokens of the whole step (the HF Trainer's num_items_in_batch)",
    # train-codellama-mistral.py at batch 1 per device: each micro-batch's token mean, averaged over GA x W.
    "example_mean": "each example's token mean, averaged over the step's examples (all micro-batches, all processes)",
}
_RENAMED_NORMALIZATIONS = {"microbatch": "microbatch_sum"}
# What a loss call returns (``build_loss(..., reduction=...)``), as in F.cross_entropy and ntloss.
REDUCTIONS = {
    "mean": "a scalar: CE and the numeric term each divided by the normalisers above (the step's counts)",
    "sum": "a scalar: the same sums with every step normaliser set to 1 (divide it yourself)",
    "none": "[B, T] per-position contributions, normalised as for mean: loss.sum() is the mean loss",
}


def check_reduction(value: str) -> str:
    if value not in REDUCTIONS:
        raise ValueError(f"reduction={value!r}; choose one of {sorted(REDUCTIONS)}")
    return value


def position_weights(loss_weights: torch.Tensor | None, labels: torch.Tensor,
                     labels_shifted: bool = False) -> torch.Tensor | None:
    """``[B*T]`` fp32 weights of the target positions from ``loss_weights`` (``[B, T]``, aligned with
    ``labels`` and shifted with them: the weight of a label is the weight of the position trained on it)."""
    if loss_weights is None:
        return None
    if not isinstance(loss_weights, torch.Tensor) or loss_weights.shape != labels.shape:
        got = tuple(loss_weights.shape) if isinstance(loss_weights, torch.Tensor) else type(loss_weights).__name__
        raise ValueError(f"loss_weights must be a tensor shaped like labels {tuple(labels.shape)}, got {got}")
    w = loss_weights.to(device=labels.device, dtype=torch.float32)
    if not (torch.compiler.is_compiling() or w.is_meta) and not bool((torch.isfinite(w) & (w >= 0)).all()):
        raise ValueError("loss_weights must be finite and >= 0 (a weight of 0 leaves a position out)")
    if not labels_shifted:
        w = torch.nn.functional.pad(w[:, 1:], (0, 1), value=0.0)
    return w.reshape(-1)


def _times(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return b if a is None else a if b is None else a * b


def check_aux_normalization(value: str) -> str:
    if value in _RENAMED_NORMALIZATIONS:
        raise ValueError(f"aux_normalization={value!r} was renamed: use {_RENAMED_NORMALIZATIONS[value]!r} (the "
                         "official Qwen/DeepSeek script's per-micro-batch sum) or 'step'")
    if value not in AUX_NORMALIZATIONS:
        raise ValueError(f"aux_normalization={value!r}; choose one of {sorted(AUX_NORMALIZATIONS)}")
    return value


def check_ce_normalization(value: str) -> str:
    if value not in CE_NORMALIZATIONS:
        raise ValueError(f"ce_normalization={value!r}; choose one of {sorted(CE_NORMALIZATIONS)}")
    return value


def effective_weight(alpha: float, aux_normalization: str, grad_accum: int = 1, world_size: int = 1) -> float:
    """Weight of a numeric term relative to a per-step mean over digit targets (the ``step`` scale).

    ``microbatch_sum`` adds GA x W per-micro-batch means, so its weight is ``alpha * GA * W`` (the
    official Qwen2.5-1.5B row: 0.01 x 32 x 4 = 1.28); ``microbatch_mean``, ``example_mean`` and
    ``step`` give ``alpha``.
    """
    check_aux_normalization(aux_normalization)
    if aux_normalization == "microbatch_sum":
        return float(alpha) * int(grad_accum) * int(world_size)
    return float(alpha)


@dataclass
class LossOutput:
    """Result of a loss call.

    loss: scalar to back-propagate (``ce + aux``); with ``reduction="none"`` the ``[B, T]`` per-position
        contributions (target alignment: position t is trained on the target ``labels[t+1]``, or ``labels[t]``
        with ``labels_shifted``), normalised as for ``"mean"``, so ``loss.sum()`` is the mean loss.
    ce, aux: detached scalars, the cross-entropy part and the extra part.
    stats: detached scalars for logging -- ``digit_acc`` (argmax over the ten digit logits equals
        the target), ``digit_entropy`` (mean entropy, in nats, of the digit-conditional
        distribution) and ``n_digits``. Empty when the loss has no digit view.
    """

    loss: torch.Tensor
    ce: torch.Tensor
    aux: torch.Tensor
    stats: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class _Batch:
    """What one call knows of its batch, for ``DigitLoss._combine``: the shifted targets ``[B, T]``, the
    packed rows' ``position_ids``, its examples with a trained target, the per-position ``loss_weights``."""

    targets: torch.Tensor
    position_ids: torch.Tensor | None
    n_examples: int
    lw: torch.Tensor | None


_WARNED: set[str] = set()


def _warn_once(key: str, message: str, category: type[Warning] = UserWarning) -> None:
    """A warning (``UserWarning`` unless told) the first time ``key`` happens in this process."""
    if key not in _WARNED:
        import warnings

        _WARNED.add(key)
        warnings.warn(message, category, stacklevel=4)


def step_of(step: StepCounts | int | torch.Tensor | None, legacy: dict, labels_shifted, where: str) -> StepCounts:
    """The call's ``StepCounts`` from ``step`` and the deprecated keyword forms (``num_items_in_batch=``, ...;
    a bare count in ``step``'s place is the old positional ``num_items_in_batch``), with a one-time
    ``FutureWarning`` for the old forms. None -> ``StepCounts()``: every normaliser is this batch's."""
    if not isinstance(labels_shifted, bool):
        raise TypeError(f"{where}: labels_shifted must be a bool, got {labels_shifted!r} (the step's counts go in "
                        "step=StepCounts(...), built by numlearn.losses.step_counts)")
    if step is not None and not isinstance(step, StepCounts):
        legacy = {"num_items_in_batch": step, **legacy}
        step = None
    if not legacy:
        return step if step is not None else StepCounts()
    unknown = sorted(set(legacy) - set(STEP_FIELDS))
    if unknown:
        raise TypeError(f"{where} got unexpected keyword argument(s) {unknown}")
    if step is not None:
        raise TypeError(f"{where}: pass the counts as step=StepCounts(...) or as the deprecated keywords, not both")
    _warn_once("step keywords", f"{where}: the counts as keywords ({', '.join(sorted(legacy))}) are deprecated and "
               "go in the next release: pass step=StepCounts(...) (numlearn.losses.step_counts builds it)",
               FutureWarning)
    return StepCounts(**legacy)


#: ``from_hidden``'s keywords before the head became one argument (2026-12-07), and the ``LinearHead`` field each
#: one fills; accepted for one release with a ``FutureWarning``
HEAD_KEYWORDS = {"lm_head_bias": "bias", "logit_transform": "transform", "chunk_size": "chunk_size",
                 "grad_accumulation": "grad_accumulation", "fused_chain": "fused_chain"}


def head_of(head, step, legacy: dict, where: str):
    """(``LinearHead``, ``step``) of a ``from_hidden`` call: ``head`` as given, or a weight tensor wrapped; the
    deprecated keyword forms (``lm_head_bias=``, ``chunk_size=``, ... popped from ``legacy``) and a bias passed
    positionally in ``step``'s place (the old fourth parameter) fill it in, with a one-time ``FutureWarning``."""
    old = {k: legacy.pop(k) for k in list(legacy) if k in HEAD_KEYWORDS}
    if (isinstance(step, torch.Tensor) and step.dim() == 1 and isinstance(head, torch.Tensor)
            and step.shape[0] == head.shape[0]):  # from_hidden(h, W, labels, bias): the old positional bias
        old, step = {"lm_head_bias": step, **old}, None
    if not isinstance(head, (LinearHead, torch.Tensor)):
        raise TypeError(f"{where}: head must be a LinearHead or the [V, H] output weight, got {type(head).__name__} "
                        "(numlearn.integrations.hf.linear_head(model) builds it from a Hugging Face model)")
    if old:
        if isinstance(head, LinearHead):
            raise TypeError(f"{where}: pass {sorted(old)} inside head=LinearHead(...), not beside it")
        _warn_once("head keywords", f"{where}: {', '.join(sorted(old))} as keywords are deprecated and go in the "
                   "next release: pass head=LinearHead(weight, bias=..., transform=..., chunk_size=..., ...)",
                   FutureWarning)
    if isinstance(head, torch.Tensor):
        head = LinearHead(head, **{HEAD_KEYWORDS[k]: v for k, v in old.items()})
    return head, step


def trained_rows(flat_t: torch.Tensor, weights: torch.Tensor | None):
    """(rows the chunked CE runs over, their weights, the targets with ignored ones clamped to a real id where
    they are run). Eager: the trained rows only (``nonzero``: one host sync, no compute on prompt or padding
    rows). Under ``torch.compile``: every row, the ignored ones with weight 0 -- the same loss and gradient with
    no data-dependent shape, so the loss compiles as one graph (issue 45)."""
    valid = flat_t != IGNORE_INDEX
    if not torch.compiler.is_compiling():
        idx = torch.nonzero(valid).squeeze(1)
        return idx, (weights[idx] if weights is not None else None), flat_t
    w = valid.float() if weights is None else weights * valid
    return torch.arange(flat_t.shape[0], device=flat_t.device), w, flat_t.clamp_min(0)


def hidden_inputs(hidden: torch.Tensor, labels: torch.Tensor, head: LinearHead) -> None:
    """``from_hidden``'s checks, shared by every loss with a linear form: hidden ``[B, T, H]`` against labels
    ``[B, T]`` and the head's ``[V, H]``."""
    if hidden.dim() != 3 or labels.shape != hidden.shape[:2]:
        raise ValueError(f"expected hidden [B, T, H] and labels [B, T], got {tuple(hidden.shape)} "
                         f"and {tuple(labels.shape)}")
    if head.weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"the head's weight is {tuple(head.weight.shape)} ([V, H]) but hidden has H = "
                         f"{hidden.shape[-1]}")


def _count_tensor(n, device) -> torch.Tensor:
    """max(n, 1) as an fp32 scalar tensor on ``device``: a count given as a tensor stays where it is (no host
    sync); a Python number becomes a constant."""
    if isinstance(n, torch.Tensor):
        return n.to(device=device, dtype=torch.float32).clamp_min(1.0)
    return torch.full((), max(float(n), 1.0), device=device)


class _CrossEntropyWithDigitLogits(torch.autograd.Function):
    """Summed token cross-entropy and the ``[N, 10]`` digit logits, with one gradient buffer.

    Gathering digit columns with ordinary indexing would make autograd allocate a second
    ``[M, V]`` gradient for the gather and add it to CE's; here the backward writes CE's gradient
    (softmax minus one-hot) into a single buffer and adds the ten digit columns' gradients in
    place, so the numeric term costs no full-vocabulary memory. The forward keeps no ``[M, V]``
    activation beyond the logits themselves (``F.cross_entropy`` saves its log-softmax).
    """

    @staticmethod
    def forward(ctx, logits2d, targets, rows, digit_ids, weights=None, per_position=False):
        # weights: [M] fp32 per-position weights of the CE sum (example-mean CE, loss_weights), None -> 1;
        # per_position: the [M] weighted CE instead of its sum (reduction="none")
        valid = targets != IGNORE_INDEX
        safe_t = targets.clamp_min(0)
        lse = torch.logsumexp(logits2d.float(), dim=-1)
        tgt_logit = logits2d.gather(1, safe_t.unsqueeze(1)).squeeze(1).float()
        ce = torch.where(valid, lse - tgt_logit, torch.zeros_like(lse))
        ce = ce if weights is None else ce * weights
        ce_sum = ce if per_position else ce.sum()
        zd = logits2d[rows.unsqueeze(1), digit_ids.unsqueeze(0)].float()
        ctx.save_for_backward(logits2d, lse, targets, rows, digit_ids,
                              weights if weights is not None else torch.empty(0))
        ctx.weighted = weights is not None
        return ce_sum, zd

    @staticmethod
    def backward(ctx, g_ce, g_zd):
        logits2d, lse, targets, rows, digit_ids, weights = ctx.saved_tensors
        valid = targets != IGNORE_INDEX
        grad = logits2d.float() - lse.unsqueeze(1)  # the one [M, V] buffer of this loss
        grad.exp_()
        # the target's -1 at the trained rows (a scatter over every row, 0 at the ignored ones: no nonzero)
        grad.scatter_add_(1, targets.clamp_min(0).unsqueeze(1), -valid.to(grad.dtype).unsqueeze(1))
        scale = valid.to(grad.dtype) * g_ce  # g_ce: a scalar, or [M] (per_position)
        if ctx.weighted:
            scale = scale * weights
        grad.mul_(scale.unsqueeze(1))
        if g_zd is not None and rows.numel():
            grad.index_put_((rows.unsqueeze(1), digit_ids.unsqueeze(0)), g_zd.to(grad.dtype), accumulate=True)
        return grad.to(logits2d.dtype), None, None, None, None, None


class TokenLoss:
    """Base of every loss: ``loss_fn(logits, labels, step=None, labels_shifted=False) -> LossOutput``.

    logits: ``[B, T, V]`` straight from a causal LM (any float dtype).
    labels: ``[B, T]``, IGNORE_INDEX (-100) or the loss's ``ignore_index`` where not trained. Unshifted (Hugging Face's convention:
        the model's input ids, masked) and shifted here; ``labels_shifted=True`` for labels that
        already hold each position's target (ntloss's convention, collators' ``shift_labels``).
    step: the whole optimizer step's counts (``StepCounts``, from ``step_counts(micro_batches, loss_fn)``):
        ``num_items_in_batch`` trained tokens (what the HF Trainer passes; CE's normaliser),
        ``num_digits_in_batch`` digit targets (``aux_normalization="step"``), ``num_microbatches_in_step``
        GA x processes (``"microbatch_mean"``), ``num_examples_in_step`` / ``num_digit_examples_in_step``
        examples with a trained / digit target (the ``example_mean`` normalisations). None, or a field left
        None -> this batch's. The five as keywords (``num_items_in_batch=...``) still work, deprecated.
    position_ids: ``[B, T]``, 0 at each sequence's first token, for packed or padding-free rows: an
        example is then a sequence, not a row (``example_ids``). None -> each row is one example.
    loss_weights: ``[B, T]`` per-position weights >= 0, aligned with ``labels`` (the weight of a label is
        that of the position trained on it): each position's CE and numeric term are multiplied by it; the
        normalisers stay counts, so a step's loss is ``sum_t w_t * loss_t / count`` whatever the split.
        Losses with a digit term (mle, ntl, dist2, del), on the logits and ``from_hidden`` paths.
    """

    name = "base"
    #: the label of untrained positions besides -100 (``F.cross_entropy``'s ``ignore_index``; e.g. -1 or the
    #: pad id): ``build_loss(..., ignore_index=-1)``; every other negative label is refused
    ignore_index: int = IGNORE_INDEX
    #: ``"mean"``, ``"sum"`` or ``"none"`` (``REDUCTIONS``): ``build_loss(..., reduction="none")``
    reduction: str = "mean"

    def __init__(self, vocab: DigitVocab | None) -> None:
        self.vocab = vocab

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor, step: StepCounts | None = None,
                 labels_shifted: bool = False, *, position_ids: torch.Tensor | None = None,
                 loss_weights: torch.Tensor | None = None, **deprecated) -> LossOutput:
        raise NotImplementedError

    #: the loss has a numeric term whose normalisation needs the step's digit count
    has_numeric_term = False
    # What the loss can do, declared here so that no code outside losses/ decides by its name
    # (``capabilities(name)``): a hidden-state form (``from_hidden``: the fused linear loss), the
    # digit vocabulary it cannot work without (else statistics only, where the tokenizer has one),
    # and the model's output embeddings (``bind_model`` before the first step).
    has_linear_form: bool = False
    needs_digit_vocab: bool = False
    needs_model_embeddings: bool = False

    ce_normalization = "token"

    @staticmethod
    def _ce_denominator(targets: torch.Tensor, num_items_in_batch) -> torch.Tensor:
        """max(the step's token count, or this batch's, 1) as an fp32 tensor on the targets' device; a count given
        as a tensor stays on its device (no host sync)."""
        n = (targets != IGNORE_INDEX).sum() if num_items_in_batch is None else num_items_in_batch
        return _count_tensor(n, targets.device)

    def _ce_weights(self, targets: torch.Tensor, position_ids) -> tuple[torch.Tensor | None, torch.Tensor | int]:
        """Per-position CE weights of ``ce_normalization`` ([B*T] fp32, 0 at an ignored position; None for
        "token") and the number of examples with a trained target in this batch (a tensor: no host sync)."""
        if self.ce_normalization == "token":
            return None, 0
        keys = example_ids(targets, position_ids).reshape(-1)
        return per_example_weights(keys, targets.reshape(-1) != IGNORE_INDEX, example_id_bound(targets))

    def _ce(self, ce_sum, targets, step: StepCounts, n_local) -> torch.Tensor:
        """CE (a sum, or ``[M]`` per position) over its normaliser: the step's tokens or examples; 1 for
        ``reduction="sum"``."""
        if self.reduction == "sum":
            return ce_sum
        if self.ce_normalization == "token":
            return ce_sum / self._ce_denominator(targets, step.num_items_in_batch)
        n = step.num_examples_in_step
        return ce_sum / _count_tensor(n if n is not None else n_local, ce_sum.device)

    def _output(self, ce: torch.Tensor, targets: torch.Tensor, aux_rows: torch.Tensor | None = None,
                aux: torch.Tensor | None = None, stats: dict | None = None) -> LossOutput:
        """LossOutput from the normalised CE (a scalar, or ``[M]`` under ``reduction="none"``) and the
        numeric term's per-digit contributions ``aux`` (``[N]`` at the flat positions ``aux_rows``)."""
        aux_sum = aux.sum() if aux is not None else ce.sum() * 0.0
        if self.reduction != "none":
            return LossOutput(loss=ce + aux_sum, ce=ce.detach(), aux=aux_sum.detach(), stats=stats or {})
        per_pos = ce if aux is None else ce.index_add(0, aux_rows, aux.to(ce.dtype))
        return LossOutput(loss=per_pos.view(targets.shape), ce=ce.sum().detach(), aux=aux_sum.detach(),
                          stats=stats or {})

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class DigitLoss(TokenLoss):
    """CE plus ``alpha * (sum over digit targets of term) / denominator``.

    Subclasses implement ``digit_term(zd, dt) -> [N]`` on the fp32 ``[N, 10]`` digit logits.
    ``aux_normalization`` (see ``AUX_NORMALIZATIONS``): ``step`` (default) divides by
    ``num_digits_in_batch`` -- the digit targets of the whole step -- so ``alpha`` is the effective
    weight whatever the split into micro-batches and processes; ``microbatch_sum`` divides by this
    call's digit count and relies on the trainer summing micro-batches (official Qwen/DeepSeek
    script: effective weight ``alpha * GA * W``); ``microbatch_mean`` also divides by
    ``num_microbatches_in_step`` (official CodeLlama/Mistral script: effective weight ``alpha``).
    """

    has_linear_form = True
    needs_digit_vocab = True

    def __init__(self, vocab: DigitVocab, alpha: float, aux_normalization: str = "step",
                 float_spans: bool = True, ce_normalization: str = "token") -> None:
        super().__init__(vocab)
        check_aux_normalization(aux_normalization)
        self.ce_normalization = check_ce_normalization(ce_normalization)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ValueError(f"alpha must be a number >= 0, got {alpha!r}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = float(alpha)
        self.aux_normalization = aux_normalization
        self.float_spans = bool(float_spans)

    def digit_term(self, zd: torch.Tensor, dt: DigitTargets) -> torch.Tensor:
        raise NotImplementedError

    def effective_weight(self, grad_accum: int = 1, world_size: int = 1) -> float:
        """Weight of the numeric term relative to a per-step mean over digit targets."""
        return effective_weight(self.alpha, self.aux_normalization, grad_accum, world_size)

    @property
    def has_numeric_term(self) -> bool:  # noqa: D102
        return self.alpha > 0

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor, step: StepCounts | None = None,
                 labels_shifted: bool = False, *, position_ids: torch.Tensor | None = None,
                 loss_weights: torch.Tensor | None = None, **deprecated) -> LossOutput:
        step = step_of(step, deprecated, labels_shifted, f"{type(self).__name__}()")
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise ValueError(f"expected logits [B, T, V] and labels [B, T], got {tuple(logits.shape)} "
                             f"and {tuple(labels.shape)}")
        V = logits.shape[-1]
        targets = to_targets(labels.to(logits.device), labels_shifted, self.ignore_index)
        flat_t = targets.reshape(-1)
        ce_w, n_ex = self._ce_weights(targets, position_ids)
        lw = position_weights(loss_weights, labels.to(logits.device), labels_shifted)
        ce_w, none = _times(ce_w, lw), self.reduction == "none"
        g = self.vocab.gather(targets, V, self.float_spans, dense=True)  # DigitVocab or NumberVocab: one protocol
        ce_sum, z = _CrossEntropyWithDigitLogits.apply(logits.reshape(-1, V), flat_t, g.rows, g.cols, ce_w, none)
        zd, number_view = g.finish(z, flat_t)
        return self._combine(ce_sum, zd, g.digits, step, _Batch(targets, position_ids, n_ex, lw), number_view)

    def from_hidden(self, hidden: torch.Tensor, head: LinearHead | torch.Tensor, labels: torch.Tensor,
                    step: StepCounts | None = None, labels_shifted: bool = False, *,
                    position_ids: torch.Tensor | None = None, loss_weights: torch.Tensor | None = None,
                    **deprecated) -> LossOutput:
        """The same loss as ``self(head.transform(hidden @ head.weight.T + head.bias), labels, step, ...)``, in
        value and in gradient (w.r.t. ``hidden``, the weight and the bias), without materialising the
        ``[B, T, V]`` logits: CE is computed ``head.chunk_size`` target positions at a time
        (``linear.chunked_linear_cross_entropy``; see there for choosing it) and the numeric term from the ten
        digit columns. The arguments after ``head`` are the logits call's.

        hidden: ``[B, T, H]`` final hidden states (after the last norm), any float dtype; works under
            ``torch.autocast``.
        head: a ``LinearHead`` (weight, bias, logit transform and how the kernel runs: chunk size, grad W's
            accumulation dtype, the compiled chain), or the ``[V, H]`` weight alone (no bias, no transform,
            default execution). ``numlearn.integrations.hf.linear_head(model)`` reads it off a Hugging Face model.

        The keywords of before 2026-12-07 (``lm_head_bias=``, ``chunk_size=``, ``logit_transform=``,
        ``grad_accumulation=``, ``fused_chain=``, the step's counts) still work for one release, with a
        ``FutureWarning``.
        """
        where = f"{type(self).__name__}.from_hidden()"
        head, step = head_of(head, step, deprecated, where)
        hidden_inputs(hidden, labels, head)
        step = step_of(step, deprecated, labels_shifted, where)
        lm_head_weight, lm_head_bias = head.weight, head.bias
        targets = to_targets(labels.to(hidden.device), labels_shifted, self.ignore_index)
        flat_t = targets.reshape(-1)
        h2 = hidden.reshape(-1, hidden.shape[-1])
        ce_w, n_ex = self._ce_weights(targets, position_ids)
        lw = position_weights(loss_weights, labels.to(hidden.device), labels_shifted)
        ce_w = _times(ce_w, lw)
        idx, ce_w, ce_t = trained_rows(flat_t, ce_w)
        per_row = self.reduction == "none"
        options = head.options(per_row)

        def spread(ce_rows):  # reduction="none": the [K] rows' CE at their flat positions
            if not per_row:
                return ce_rows
            return torch.zeros(flat_t.shape[0], dtype=ce_rows.dtype, device=ce_rows.device).index_add(0, idx, ce_rows)

        if self.vocab is None:  # MLE with a digit-merging tokenizer: plain CE
            ce_sum, _ = linear_ce_and_digit_logits(h2, lm_head_weight, lm_head_bias, idx, ce_t[idx], ce_w,
                                                   options=options)
            return self._output(self._ce(spread(ce_sum), targets, step, n_ex), targets)
        # the digit columns only (number tokens: their <= 1,110 columns), h @ W[cols].T: never the full logits
        g = self.vocab.gather(targets, lm_head_weight.shape[0], self.float_spans, dense=True)
        ce_sum, z = linear_ce_and_digit_logits(h2, lm_head_weight, lm_head_bias, idx, ce_t[idx], ce_w,
                                               (g.rows, g.cols), options)
        zd, number_view = g.finish(z, flat_t)
        return self._combine(spread(ce_sum), zd, g.digits, step, _Batch(targets, position_ids, n_ex, lw), number_view)

    #: the numeric term is on number tokens (``number_term``), not on digits (``digit_term``); with
    #: single-digit tokens the two are the same thing
    on_number_tokens = False

    def number_term(self, zn: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
        """``[P]`` term of P number-token targets from their ``[P, n_number_tokens]`` logits (the
        columns of ``vocab.ids``, in that order); ``target_ids``: the target token ids ``[P]``."""
        raise NotImplementedError

    def _combine(self, ce_sum, zd, dt, step: StepCounts, batch: _Batch, number_view=None) -> LossOutput:
        """CE mean (see ``ce_normalization``) and the normalised numeric term (see
        ``aux_normalization``) -> LossOutput. ``number_view``: (number-column logits ``[P, n]``,
        target ids ``[P]``, each digit target's token ``[N]``) of a number-token vocabulary, for a term
        on number tokens: a token's term is counted at each of its digits, so every normalisation
        stays a per-digit one. ``batch.lw``: ``[M]`` per-position ``loss_weights`` (already in ``ce_sum``),
        applied to each digit's term here; the normalisers stay counts, not sums of weights."""
        targets, lw = batch.targets, batch.lw
        ce = self._ce(ce_sum, targets, step, batch.n_examples)

        denom = dt.size().clamp_min(1.0)  # tensors throughout: no host sync (issue 45)
        per_digit = None  # example_mean: 1 / (digit targets of the digit's example)
        if (self.aux_normalization == "step" and step.num_digits_in_batch is None
                and step.num_items_in_batch is not None and self.alpha > 0):
            _warn_once("num_items_in_batch without num_digits_in_batch",
                       f"{type(self).__name__}: the step's token count (num_items_in_batch) came without its digit count "
                       "(num_digits_in_batch), so the numeric term is normalised by this micro-batch's digits, not the "
                       "step's (under gradient accumulation the step's objective differs); pass both: "
                       "step=numlearn.losses.step_counts(micro_batches, loss_fn)")
        if self.aux_normalization == "step" and step.num_digits_in_batch is not None:
            denom = _count_tensor(step.num_digits_in_batch, zd.device)
        elif self.aux_normalization == "microbatch_mean":
            k = step.num_microbatches_in_step
            denom = denom * _count_tensor(k if k is not None else 1, zd.device)
        elif self.aux_normalization == "example_mean":
            per_digit, n_local = self._per_digit_example_weights(dt, example_ids(targets, batch.position_ids),
                                                                 example_id_bound(targets))
            n = step.num_digit_examples_in_step
            denom = _count_tensor(n if n is not None else n_local, zd.device)
        if self.reduction == "sum":
            denom = torch.ones((), device=zd.device)
        if lw is not None:
            per_digit = _times(per_digit, lw[dt.rows])
        if self.alpha > 0:
            if self.on_number_tokens and number_view is not None:
                zn, target_ids, token_of_digit = number_view
                term = self.number_term(zn, target_ids)[token_of_digit]  # [N]: the token's term at each digit
            else:
                term = self.digit_term(zd, dt)
            aux = dt.masked(self.alpha * (term if per_digit is None else term * per_digit) / denom)  # [N]
        else:
            aux = zd.sum(-1) * 0.0  # keeps the graph so backward works with no digits / alpha 0
        return self._output(ce, targets, dt.rows, aux, _digit_stats(zd.detach(), dt))

    @staticmethod
    def _per_digit_example_weights(dt, examples: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N]`` 1 / (digit targets of each digit's example), 0 at a row the dense form's mask leaves out, and
        the number of examples with a digit target (``aux_normalization="example_mean"``; counted over the digit
        rows only, in either form; a tensor: no host sync)."""
        return per_example_weights(examples.reshape(-1)[dt.rows], dt.mask, size)

    def extra_repr(self) -> str:
        return (f"alpha={self.alpha}, aux_normalization={self.aux_normalization!r}, "
                f"ce_normalization={self.ce_normalization!r}, float_spans={self.float_spans}")


def digit_summary(zd: torch.Tensor, dt: DigitTargets) -> dict[str, torch.Tensor]:
    """Sums over the digit targets of a batch (add them across batches, divide by ``n``):
    ``n``, ``correct`` (argmax of the ten digit logits is the target), ``entropy`` (nats, of the
    digit-conditional distribution p), ``nll`` (nats, -log p(target digit) under p),
    ``mass_by_distance[k]`` (p's mass at |digit - target| = k,
    the paper's Figure 1 view) and the per-target ``entropies``."""
    logp = torch.log_softmax(zd.float(), dim=-1)
    p = logp.exp()
    ent = dt.masked(-(p * logp).sum(-1))
    dist = (torch.arange(10, device=zd.device) - dt.values.unsqueeze(1)).abs()
    by_dist = torch.zeros(10, device=zd.device).index_add_(0, dist.reshape(-1), dt.masked(p).reshape(-1))
    return {"n": dt.size().to(zd.device),
            "correct": dt.masked((zd.argmax(-1) == dt.values).float()).sum(), "entropy": ent.sum(),
            "nll": -dt.masked(logp.gather(-1, dt.values.long().unsqueeze(-1)).squeeze(-1)).sum(),
            "mass_by_distance": by_dist, "entropies": ent}


def _digit_stats(zd: torch.Tensor, dt: DigitTargets) -> dict[str, torch.Tensor]:
    """Per-batch means for logging: ``digit_acc``, ``digit_entropy``, ``digit_logit`` (the raw digit
    logits' mean, which softmax ignores and DEL's code form does not), ``n_digits``."""
    s = digit_summary(zd, dt)
    n = s["n"].clamp_min(1.0)
    return {"digit_acc": s["correct"] / n, "digit_entropy": s["entropy"] / n,
            "digit_logit": dt.masked(zd.detach().float().mean(-1)).sum() / n, "n_digits": s["n"]}


def digit_view(logits: torch.Tensor, labels: torch.Tensor, vocab: DigitVocab | NumberVocab, float_spans: bool = True,
               labels_shifted: bool = False, ignore_index: int = IGNORE_INDEX,
               dense: bool = False) -> tuple[torch.Tensor, DigitTargets]:
    """(fp32 ``[N, 10]`` digit logits, DigitTargets) of a batch, without gradients: for analysis
    (digit distributions per loss, the paper's Figure 1) rather than training. ``dense``: every position, with
    the mask (``DigitTargets.mask``; the losses' statistics, no host sync)."""
    with torch.no_grad():
        targets = to_targets(labels.to(logits.device), labels_shifted, ignore_index)
        g = vocab.gather(targets, logits.shape[-1], float_spans, dense=dense)
        z = logits.reshape(-1, logits.shape[-1])[g.rows.unsqueeze(1), g.cols.unsqueeze(0)].float()
        zd, _ = g.finish(z, targets.reshape(-1))
        dt = g.digits
    return zd, dt
