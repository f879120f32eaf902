"""Token-level alternatives to MLE from the paper's loss ablation: MixCE and EMO (docs/method.md).

These act on the whole vocabulary, not on digits; they use ordinary autograd (they need per-token
CE or the full softmax anyway). Each has two forms:

* ``form="paper"``: the method paper's per-token formula;
* ``form="official"``: what ``train-qwen-deepseek.py`` holds for the ablation rows -- commented-out
  code in which ``mle_loss`` is the step's *scalar* token-mean CE. These are reconstructions of dead
  code (its EMO line names an undefined variable), kept exactly as written so the rows can be
  re-run as the authors could have run them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import (
    LossOutput,
    TokenLoss,
    _digit_stats,
    digit_view,
    head_of,
    hidden_inputs,
    step_of,
    trained_rows,
)
from .digits import DigitVocab
from .linear import LinearHead, linear_ce_and_digit_logits
from .spans import to_targets
from .steps import StepCounts


class _FullSoftmaxLoss(TokenLoss):
    """Losses over the full softmax (no hidden-state form); digit ids for statistics only."""

    has_linear_form = False
    needs_digit_vocab = False

    def _step_items(self, step, deprecated, labels_shifted, loss_weights):
        """The step's token count (``step``, or the deprecated keywords); per-token weights refused: these
        losses normalise their own token loss."""
        if loss_weights is not None:
            raise ValueError(f"loss {self.name!r} normalises its own token loss: loss_weights (and reduction) are "
                             "available for mle, ntl, dist2 and del")
        return step_of(step, deprecated, labels_shifted, f"{type(self).__name__}()").num_items_in_batch

    def _prepare(self, logits, labels, labels_shifted=False):
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise ValueError(f"expected logits [B, T, V] and labels [B, T], got {tuple(logits.shape)} "
                             f"and {tuple(labels.shape)}")
        targets = to_targets(labels.to(logits.device), labels_shifted, self.ignore_index).reshape(-1)
        rows, valid, y = trained_rows(targets, None)  # eager: the trained rows; compiled: all, weight 0 if ignored
        logits2d = logits.reshape(-1, logits.shape[-1])[rows].float()  # [n_valid (or all), V]
        return targets, valid, logits2d, y[rows]

    def _stats(self, logits, labels, labels_shifted=False):
        if self.vocab is None:
            return {}
        zd, dt = digit_view(logits.detach(), labels, self.vocab, labels_shifted=labels_shifted,
                            ignore_index=self.ignore_index, dense=True)
        return _digit_stats(zd, dt)


FORMS = ("paper", "official")


def _weighted(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Per-row values with the ignored rows' set to 0 (``valid``: the compiled form's row weights; None in
    eager, where only trained rows are there)."""
    return x if valid is None else x * valid


def _n_rows(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """The trained rows' count, as a tensor (no sync)."""
    return torch.full((), float(x.shape[0]), device=x.device) if valid is None else valid.sum()


def _check_form(loss: str, form: str) -> str:
    if form not in FORMS:
        raise ValueError(f"{loss} form={form!r}; choose one of {FORMS}")
    return form


class MixCELoss(_FullSoftmaxLoss):
    """MixCE (Zhang et al., 2023). ``aux`` is reported as the difference to plain CE.

    form="paper" (default): per token ``eta * ce_t + (1 - eta) * stopgrad(exp(-ce_t)) * ce_t``,
    summed and divided like CE.
    form="official": with ``c`` the micro-batch's CE sum over the step's token count (a scalar),
    ``(eta * c + (1 - eta) * stopgrad(exp(-c)) * c) * n_tokens`` -- the official code multiplies the
    scalar by the micro-batch's token mask and sums, i.e. a rescaled MLE.
    """

    name = "mixce"

    def __init__(self, vocab: DigitVocab | None, eta: float = 0.5, form: str = "paper") -> None:
        super().__init__(vocab)
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"MixCE eta must be in [0, 1], got {eta}")
        self.eta = float(eta)
        self.form = _check_form("MixCE", form)

    def _mix(self, ce):
        return self.eta * ce + (1.0 - self.eta) * torch.exp(-ce).detach() * ce

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor, step: StepCounts | None = None,
                 labels_shifted: bool = False, *, position_ids: torch.Tensor | None = None,
                 loss_weights: torch.Tensor | None = None, **deprecated) -> LossOutput:
        num_items_in_batch = self._step_items(step, deprecated, labels_shifted, loss_weights)
        targets, valid, logits2d, y = self._prepare(logits, labels, labels_shifted)
        ce_tok = _weighted(F.cross_entropy(logits2d, y, reduction="none"), valid)
        denom = self._ce_denominator(targets.view(1, -1), num_items_in_batch)
        ce = ce_tok.sum() / denom
        if self.form == "paper":
            loss = self._mix(ce_tok).sum() / denom  # an ignored row's ce is 0, so is its mix
        else:
            loss = self._mix(ce) * _n_rows(ce_tok, valid)
        return LossOutput(loss=loss, ce=ce.detach(), aux=(loss - ce).detach(), stats=self._stats(logits, labels, labels_shifted))

    #: MixCE's token loss is CE times a detached function of CE, so it has a linear form (issue 45): the chunked
    #: CE per row (its backward recomputes the chunks) for the paper's form, the chunked CE sum for the official one
    has_linear_form = True

    def from_hidden(self, hidden: torch.Tensor, head: LinearHead | torch.Tensor, labels: torch.Tensor,
                    step: StepCounts | None = None, labels_shifted: bool = False, *,
                    position_ids: torch.Tensor | None = None, loss_weights: torch.Tensor | None = None,
                    **deprecated) -> LossOutput:
        """``self(head.transform(hidden @ head.weight.T + head.bias), labels, ...)`` in value and gradient,
        without the ``[B, T, V]`` logits (``TokenLoss.from_hidden`` documents the arguments). The paper's form
        needs each token's CE before its gradient (the weight ``eta + (1 - eta) exp(-ce_t)``): the per-row pass,
        whose backward recomputes each chunk once; the official form scales the chunked CE sum."""
        head, step = head_of(head, step, deprecated, f"{type(self).__name__}.from_hidden()")
        num_items_in_batch = self._step_items(step, deprecated, labels_shifted, loss_weights)
        hidden_inputs(hidden, labels, head)
        lm_head_weight, lm_head_bias = head.weight, head.bias
        targets = to_targets(labels.to(hidden.device), labels_shifted, self.ignore_index)
        flat_t = targets.reshape(-1)
        idx, valid, ce_t = trained_rows(flat_t, None)  # compiled: every row, weight 0 where ignored
        g = self.vocab.gather(targets, lm_head_weight.shape[0], True, dense=True) if self.vocab is not None else None
        ce, z = linear_ce_and_digit_logits(hidden.reshape(-1, hidden.shape[-1]), lm_head_weight, lm_head_bias, idx,
                                           ce_t[idx], valid, (g.rows, g.cols) if g else None,
                                           head.options(per_row=self.form == "paper"))
        denom = self._ce_denominator(flat_t.view(1, -1), num_items_in_batch)
        if self.form == "paper":  # ce: [K] per-row CE (0 at an ignored row)
            loss, ce = self._mix(ce).sum() / denom, ce.sum() / denom
        else:  # ce: the summed CE
            ce = ce / denom
            loss = self._mix(ce) * _n_rows(idx, valid)
        stats = _digit_stats(g.finish(z.detach(), flat_t)[0], g.digits) if g is not None else {}
        return LossOutput(loss=loss, ce=ce.detach(), aux=(loss - ce).detach(), stats=stats)

    def extra_repr(self) -> str:
        return f"eta={self.eta}, form={self.form!r}"


class EMOLoss(_FullSoftmaxLoss):
    """EMO (Ren et al., 2024): earth mover distance with a cost from the frozen, row-normalised
    output embedding E at initialisation. Per token
    ``emo_t = 1 - <E[y], (q - stopgrad(q * onehot(y))) @ E>`` with q the full softmax. With ``c`` the
    CE (token sum over the step's token count):

    form="official" (default; the ablation row): per token ``0.5 * (c + stopgrad(c / emo_t) * emo_t)``
    with the scalar ``c``, then the mean over this micro-batch's tokens (``train-qwen-deepseek.py``;
    its ``+ 1e-10`` guard is kept).
    form="paper": ``0.5 * (c + stopgrad(c / emo) * emo)`` with ``emo`` the batch mean of ``emo_t``.
    Both have the value of ``c``; their gradients differ (each token's EMO term is scaled by
    ``c / emo_t`` rather than ``c / emo``).

    output_embeddings: ``[V, H]`` tensor (e.g. ``model.get_output_embeddings().weight``); copied,
    normalised and frozen when bound (construction or ``bind_model``).

    Not invariant to gradient accumulation, by construction, in either form: the per-token weight uses
    the micro-batch's CE (``official``) or its mean ``emo`` (``paper``), so GA 4 of one step and one big
    batch differ (a review measured 4.5e-4 relative at GA 4); every other loss here is exact under accumulation.
    """

    name = "emo"

    needs_model_embeddings = True

    def __init__(self, vocab: DigitVocab | None, output_embeddings: torch.Tensor | None = None,
                 form: str = "official") -> None:
        super().__init__(vocab)
        self.form = _check_form("EMO", form)
        self.embedding = None
        if output_embeddings is not None:
            self.bind_embeddings(output_embeddings)

    def bind_embeddings(self, output_embeddings: torch.Tensor) -> EMOLoss:
        e = output_embeddings.detach().float().clone()
        self.embedding = e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return self

    def bind_model(self, model: torch.nn.Module) -> EMOLoss:
        """Take the cost from ``model``'s output embedding as it is now (call before training)."""
        return self.bind_embeddings(model.get_output_embeddings().weight)

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor, step: StepCounts | None = None,
                 labels_shifted: bool = False, *, position_ids: torch.Tensor | None = None,
                 loss_weights: torch.Tensor | None = None, **deprecated) -> LossOutput:
        num_items_in_batch = self._step_items(step, deprecated, labels_shifted, loss_weights)
        if self.embedding is None:
            raise ValueError("loss 'emo' needs the model's output embedding matrix: "
                             "build_loss('emo', tokenizer, model=model), or loss.bind_model(model) before training")
        if self.embedding.device != logits.device:
            # bound before the Trainer placed the model: the cost matrix follows the logits once, not a host
            # -> device copy of [V, H] every micro-batch (~889 MB for Qwen2.5-1.5B)
            self.embedding = self.embedding.to(logits.device)
        targets, valid, logits2d, y = self._prepare(logits, labels, labels_shifted)
        E = self.embedding
        if E.shape[0] < logits2d.shape[1]:
            raise ValueError(f"EMO embedding has {E.shape[0]} rows but logits have {logits2d.shape[1]} columns")
        E = E[: logits2d.shape[1]]
        ce_tok = _weighted(F.cross_entropy(logits2d, y, reduction="none"), valid)
        q = torch.softmax(logits2d, dim=-1)
        q_y = q.gather(1, y.unsqueeze(1))
        q_minus = q.scatter(1, y.unsqueeze(1), q_y - q_y.detach())  # q - stopgrad(q * onehot(y))
        emo_tok = _weighted(1.0 - ((q_minus @ E) * E[y]).sum(-1), valid)
        denom = self._ce_denominator(targets.view(1, -1), num_items_in_batch)
        ce = ce_tok.sum() / denom
        if self.form == "official":
            per_tok = _weighted(0.5 * ((ce / (emo_tok + 1e-10)).detach() * emo_tok + ce), valid)
            loss = per_tok.sum() / _n_rows(per_tok, valid).clamp_min(1.0)
        else:
            emo = emo_tok.sum() / denom
            loss = 0.5 * (ce + (ce / emo.clamp_min(1e-12)).detach() * emo)
        return LossOutput(loss=loss, ce=ce.detach(), aux=(loss - ce).detach(), stats=self._stats(logits, labels, labels_shifted))
