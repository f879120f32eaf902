"""What the DEL term's gradient does to one digit position, in closed form (docs/what_del_does.md).

For one digit target with the ten digit logits ``z`` (fp32 ``[N, 10]``), target ``y``, the digit-
conditional distribution ``p = softmax(z)`` and ``s = sigmoid(z)``, the per-position term of each form
(before the place weight ``w``, ``alpha`` and the normalisation) is

* code  (the authors' code):  ``L = (1/10) sum_k p_k b_k``, ``b_k = BCE(s_k, [k == y])``
  = ``softplus(z_k) - [k == y] z_k``;
* paper (our reading of eqs. 7-9): ``L = -log p_y + (1/10) (1 - p_y)``;
* binary_entropy (eq. 8 read literally): ``L = H_b(p_y) + (1/10) (1 - p_y)``,
  ``H_b(p) = -p log p - (1 - p) log(1 - p)``;
* digit_ce (the control: the paper form without its linear term): ``L = -log p_y``.

Their gradients with respect to the digit logits are

* code:  ``g_j = (1/10) p_j (b_j - B + s_j - [j == y])``, ``B = sum_k p_k b_k``;
* paper: ``g_j = p_j - [j == y] - (1/10) p_y ([j == y] - p_j)``;
* binary_entropy: ``g_j = (log((1 - p_y) / p_y) - 1/10) p_y ([j == y] - p_j)``;
* digit_ce: ``g_j = p_j - [j == y]``.

A gradient step ``dz = -eta g`` on the digit logits alone moves the log-probability of the target
token under the full vocabulary softmax by ``-eta (g_y - q sum_j p_j g_j)``, where ``q`` is the
digit tokens' share of the full softmax: the step lowers the target's probability exactly when
``g_y > q * sum_j p_j g_j`` (``target_push`` < 0). The paper form never does (its term is a
decreasing function of ``p_y`` alone, and ``g_y - q pbar(g) = -(1 + p_y/10)((1 - p_y) + q(sum p^2 - p_y))
< 0``). The code form does where the target's BCE outweighs the others' (``b_y - B`` large: the
sigmoid of a low raw logit), because lowering ``p_y`` then lowers the weight on the largest BCE --
and, unlike softmax, its value changes under a uniform shift of the ten logits. The binary-entropy
reading is a function of ``p_y`` alone with ``dL/dp_y = log((1 - p_y)/p_y) - 1/10``: its step lowers the
target wherever that is positive, ``p_y < 1 / (1 + e^0.1) = 0.475``, for any ``q`` (the push is
``-c p_y ((1 - p_y) - q (p_y - sum p^2))`` and the bracket is at least ``(1 - p_y)^2``); digit_ce never does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FORMS = ("code", "paper", "binary_entropy", "digit_ce")


def del_digit_gradient(zd: torch.Tensor, y: torch.Tensor, form: str = "code") -> torch.Tensor:
    """``dL/dz`` per position, ``[N, 10]``, for the per-position term above (``w = 1``); fp32, or
    fp64 for fp64 logits."""
    if form not in FORMS:
        raise ValueError(f"form={form!r}; choose one of {FORMS}")
    z = zd if zd.dtype == torch.float64 else zd.float()
    p = torch.softmax(z, dim=-1)
    onehot = F.one_hot(y.long(), 10).to(z.dtype)
    if form == "code":
        b = F.softplus(z) - onehot * z
        big_b = (p * b).sum(-1, keepdim=True)
        return p * (b - big_b + torch.sigmoid(z) - onehot) / 10.0
    if form == "digit_ce":
        return p - onehot
    p_y = (p * onehot).sum(-1, keepdim=True)
    if form == "paper":
        return p - onehot - p_y * (onehot - p) / 10.0
    logp = torch.log_softmax(z, dim=-1)
    logp_y = (logp * onehot).sum(-1, keepdim=True)
    log_off = torch.logsumexp(logp.masked_fill(onehot.bool(), float("-inf")), dim=-1, keepdim=True)
    return (log_off - logp_y - 0.1) * p_y * (onehot - p)


def target_push(zd: torch.Tensor, y: torch.Tensor, form: str = "code", digit_mass: torch.Tensor | float = 1.0
                ) -> torch.Tensor:
    """``d log P(y) / d eta`` for a step ``dz = -eta g`` of the term's gradient on the digit logits,
    ``[N]``: negative where the term lowers the target's probability. ``digit_mass``: ``q``, the
    digit tokens' share of the full-vocabulary softmax (1: the digit-conditional probability)."""
    g = del_digit_gradient(zd, y, form)
    p = torch.softmax(zd.to(g.dtype), dim=-1)
    g_y = g.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    q = torch.as_tensor(digit_mass, dtype=g.dtype, device=g.device)
    return -(g_y - q * (p * g).sum(-1))
