"""The digit-level losses of the paper's Table 1: MLE, NTL, DIST2 and DEL (docs/method.md).

Each is ``CE + alpha * (sum over digit targets of a per-digit term) / normaliser`` where the term
is computed in fp32 on the ``[N, 10]`` digit logits ``zd`` only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import DigitLoss, LossOutput, _CrossEntropyWithDigitLogits, _times, position_weights, step_of
from .digits import DigitVocab
from .spans import DigitTargets, to_targets
from .steps import StepCounts

PLACE_WEIGHTS = ("official", "none")
DEL_FORMS = ("code", "paper", "binary_entropy", "digit_ce")
NTL_LEVELS = ("digit", "number")


def _onehot10(y: torch.Tensor) -> torch.Tensor:
    """``[N]`` digits -> ``[N, 10]`` bool one-hot. ``F.one_hot`` checks its input's range on the host (two reads
    back per call); digit targets are 0..9 by construction."""
    return y.unsqueeze(-1) == torch.arange(10, device=y.device)


class MLELoss(DigitLoss):
    """Plain token cross-entropy. Digit statistics are still reported, so MLE runs can be compared
    with the others on digit accuracy and digit-distribution entropy. With a tokenizer that merges
    digits (``vocab=None``) it is plain CE without digit statistics."""

    name = "mle"
    needs_digit_vocab = False  # digit statistics only, where the tokenizer has single-digit tokens

    def __init__(self, vocab: DigitVocab | None, aux_normalization: str = "step",
                 ce_normalization: str = "token") -> None:
        super().__init__(vocab, alpha=0.0, aux_normalization=aux_normalization, ce_normalization=ce_normalization)

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor, step: StepCounts | None = None,
                 labels_shifted: bool = False, *, position_ids: torch.Tensor | None = None,
                 loss_weights: torch.Tensor | None = None, **deprecated) -> LossOutput:
        if self.vocab is not None:
            return super().__call__(logits, labels, step, labels_shifted, position_ids=position_ids,
                                    loss_weights=loss_weights, **deprecated)
        step = step_of(step, deprecated, labels_shifted, f"{type(self).__name__}()")
        # a tokenizer without single-digit tokens: the same fused CE kernel with no digit columns (one [M, V]
        # gradient buffer, not F.cross_entropy's fp32 copy plus its log-softmax)
        targets = to_targets(labels.to(logits.device), labels_shifted, self.ignore_index)
        ce_w, n_ex = self._ce_weights(targets, position_ids)
        ce_w = _times(ce_w, position_weights(loss_weights, labels.to(logits.device), labels_shifted))
        none = torch.zeros(0, dtype=torch.long, device=logits.device)
        ce_sum, _ = _CrossEntropyWithDigitLogits.apply(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                       none, none, ce_w, self.reduction == "none")
        return self._output(self._ce(ce_sum, targets, step, n_ex), targets)

    def extra_repr(self) -> str:
        return f"ce_normalization={self.ce_normalization!r}"


class NTLLoss(DigitLoss):
    """Number Token Loss (Zausinger et al., ICML 2025) on the digit-conditional distribution p.

    variant="was": ``sum_k |y - k| * p[k]`` (Wasserstein-1 between one-hot(y) and p);
    variant="mse": ``(sum_k k * p[k] - y)^2``. Averaged over digit targets, times alpha.

    level="number" (for tokenizers that group digits into number tokens, the ntloss-style
    ``digit_level=False`` comparison): the same two terms on whole number tokens, with p the softmax
    over the number tokens only and k running over their integer values (Llama-3: 0..999; "7", "07"
    and "007" are all 7). A token's term is counted at each of its digits, so alpha and every
    ``aux_normalization`` mean what they mean for the digit terms (a mean over digit targets). With
    single-digit tokens it is the digit level exactly.
    alpha has no default (the NTL authors use 0.3 on their own scale). The DEL authors' baseline takes ``.mean()`` over the
    ``[N, 10]`` terms with coefficient 1, i.e. alpha 0.1 per micro-batch; in their Qwen/DeepSeek
    script that is summed over GA x W micro-batches (effective 12.8 for Qwen2.5-1.5B).
    """

    name = "ntl"

    def __init__(self, vocab: DigitVocab, alpha: float, variant: str = "was",
                 aux_normalization: str = "step", ce_normalization: str = "token", level: str = "digit") -> None:
        super().__init__(vocab, alpha, aux_normalization, float_spans=False, ce_normalization=ce_normalization)
        if variant not in ("was", "mse"):
            raise ValueError(f"NTL variant={variant!r}; choose 'was' or 'mse'")
        if level not in NTL_LEVELS:
            raise ValueError(f"NTL level={level!r}; choose one of {NTL_LEVELS} (number: on whole number tokens)")
        self.variant, self.level = variant, level
        self.on_number_tokens = level == "number"

    def number_term(self, zn: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
        ids = self.vocab.ids_tensor(zn.device)
        v = self.vocab.values_tensor(zn.device)  # [n]: each number token's integer value
        order = torch.argsort(ids)  # ids ascending from NumberVocab.from_strings; any order by hand
        y = v[order[torch.searchsorted(ids[order], target_ids)]]
        p = torch.softmax(zn.float(), dim=-1)
        if self.variant == "was":
            return (p * (y.unsqueeze(1) - v).abs()).sum(-1)
        return ((p * v).sum(-1) - y) ** 2

    def digit_term(self, zd: torch.Tensor, dt: DigitTargets) -> torch.Tensor:
        p = torch.softmax(zd, dim=-1)
        k = torch.arange(10, device=zd.device, dtype=zd.dtype)
        y = dt.values.to(zd.dtype)
        if self.variant == "was":
            return (p * (y.unsqueeze(1) - k).abs()).sum(-1)
        return ((p * k).sum(-1) - y) ** 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}" + (", level='number'" if self.on_number_tokens else "")


class Dist2Loss(DigitLoss):
    """Discretized distance loss (DIST2, Chung et al., ICLR 2026).

    Soft target ``q[k] = softmax_k(-(y - k)^2 / tau)``; with ``beta`` set, ``q[y] = beta`` and the
    other nine share ``1 - beta`` by the same distance softmax (their eq. 4). Term per digit target:
    ``w * KL(q || p)`` with the KL summed over the ten classes and ``w = r`` the integer place
    (units 1, tens 2, ...; "." breaks runs) or 1 with ``place_weights="none"``.
    The DEL authors' two scripts differ: the Qwen/DeepSeek one sums the KL's ten terms per digit
    (``.sum(-1)``, coefficient 1: alpha 1.0 per micro-batch; it returns a per-digit vector, so some
    reduction -- the mean, as for their other terms -- is needed to run it at all); the
    CodeLlama/Mistral one averages them (``.mean(-1)``, KL / 10: alpha 0.1).
    """

    name = "dist2"

    def __init__(self, vocab: DigitVocab, alpha: float, tau: float = 1.0, beta: float | None = None,
                 place_weights: str = "official", aux_normalization: str = "step",
                 ce_normalization: str = "token") -> None:
        super().__init__(vocab, alpha, aux_normalization, float_spans=False, ce_normalization=ce_normalization)
        if tau <= 0:
            raise ValueError(f"DIST2 tau must be > 0, got {tau}")
        if beta is not None and not 0.0 < beta < 1.0:
            raise ValueError(f"DIST2 beta must be in (0, 1) or null, got {beta}")
        if place_weights not in PLACE_WEIGHTS:
            raise ValueError(f"place_weights={place_weights!r}; choose one of {PLACE_WEIGHTS}")
        self.tau, self.beta, self.place_weights = float(tau), beta, place_weights

    def soft_targets(self, y: torch.Tensor) -> torch.Tensor:
        """``[N]`` long digits -> ``[N, 10]`` soft targets q."""
        k = torch.arange(10, device=y.device, dtype=torch.float32)
        logits = -((y.float().unsqueeze(1) - k) ** 2) / self.tau
        if self.beta is None:
            return torch.softmax(logits, dim=-1)
        onehot = _onehot10(y)
        rest = torch.softmax(logits.masked_fill(onehot, float("-inf")), dim=-1)
        return torch.where(onehot, torch.full_like(rest, self.beta), (1.0 - self.beta) * rest)

    def digit_term(self, zd: torch.Tensor, dt: DigitTargets) -> torch.Tensor:
        q = self.soft_targets(dt.values)
        logp = torch.log_softmax(zd, dim=-1)
        kl = (q * (torch.log(q.clamp_min(1e-30)) - logp)).sum(-1)
        w = dt.int_place if self.place_weights == "official" else torch.ones_like(kl)
        return w * kl

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tau={self.tau}, beta={self.beta}, place_weights={self.place_weights!r}"


class DELLoss(DigitLoss):
    """Digit Entropy Loss (Zheng et al., 2026).

    form="code" (default; what the authors' training code computes): for every digit target i and
    class k, ``b[i,k] = BCE(sigmoid(zd[i,k]), [k == y_i])`` weighted by ``p[i,k] = softmax(zd_i)[k]``:

        DEL = alpha / (10 N) * sum_i w_i * sum_k p[i,k] * b[i,k]

    form="paper": one reading of the paper's equations 7-9, whose text is ambiguous (eq. 9:
    ``H = BCE(p(g), 1) = -log p(g)``): ``w_i * (-log p[i,y] + (1/10) * sum_{k != y} p[i,k])``
    averaged over digit targets, times alpha.

    Two more readings, as controls for what the paper form's gain means (docs/method.md, "Readings"):
    form="binary_entropy": eq. 8 taken literally, the binary entropy of ``p[i,y]`` in place of
    ``-log p[i,y]``: ``w_i * (H_b(p[i,y]) + (1/10) * sum_{k != y} p[i,k])``; its gradient lowers
    ``p[i,y]`` wherever ``log((1 - p)/p) > 1/10`` (p below ~0.475).
    form="digit_ce": the paper form without its bounded linear term -- place-weighted digit-softmax CE
    ``w_i * -log p[i,y]``: plain digit-upweighted CE, the control for DEL-specific effects.

    Place weights (``place_weights="official"``): ``2r`` for integer digits, ``1.02^-(k+1)`` for
    the k-th position after the decimal point (``float_spans=True``); with ``float_spans=False``
    "." breaks spans (integer-only DEL). ``place_weights="none"`` sets every w to 1.
    The official scripts write alpha 0.01 (Qwen/DeepSeek) and 0.1 (CodeLlama/Mistral), but their
    harnesses scale it differently: effective weights 1.28 (Qwen2.5-1.5B), 2.56 (DeepSeek-Math-7B),
    0.1 (CodeLlama-7B, Mistral-7B) on the ``step`` scale -- see ``effective_weight``.
    """

    name = "del"

    def __init__(self, vocab: DigitVocab, alpha: float, form: str = "code",
                 place_weights: str = "official", float_spans: bool = True,
                 aux_normalization: str = "step", ce_normalization: str = "token") -> None:
        super().__init__(vocab, alpha, aux_normalization, float_spans=float_spans,
                         ce_normalization=ce_normalization)
        if form not in DEL_FORMS:
            raise ValueError(f"DEL form={form!r}; choose one of {DEL_FORMS}")
        if place_weights not in PLACE_WEIGHTS:
            raise ValueError(f"place_weights={place_weights!r}; choose one of {PLACE_WEIGHTS}")
        self.form, self.place_weights = form, place_weights

    def digit_term(self, zd: torch.Tensor, dt: DigitTargets) -> torch.Tensor:
        w = dt.del_weight if self.place_weights == "official" else torch.ones_like(dt.del_weight)
        onehot = _onehot10(dt.values).to(zd.dtype)
        logp = torch.log_softmax(zd, dim=-1)
        p = logp.exp()
        if self.form == "code":
            bce = F.softplus(zd) - onehot * zd  # = BCE(sigmoid(z), onehot), stable for any z
            return w * (p * bce).sum(-1) / 10.0
        logp_y = (logp * onehot).sum(-1)
        if self.form == "digit_ce":
            return -w * logp_y
        off_target = (p * (1.0 - onehot)).sum(-1)
        if self.form == "paper":
            return w * (off_target / 10.0 - logp_y)
        # binary_entropy: log(1 - p_y) from the off-target logits (stable where p_y -> 1)
        log_off = torch.logsumexp(logp.masked_fill(onehot.bool(), float("-inf")), dim=-1)
        h_b = -(logp_y.exp() * logp_y + off_target * log_off)
        return w * (h_b + off_target / 10.0)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, form={self.form!r}, place_weights={self.place_weights!r}")
