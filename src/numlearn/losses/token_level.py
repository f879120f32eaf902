"""Token-level alternatives to MLE from the paper's loss ablation: MixCE and EMO (METHOD.md).

These act on the whole vocabulary, not on digits; they follow the published formulas and use
ordinary autograd (they need per-token CE or the full softmax anyway).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import LossOutput, TokenLoss, _digit_stats
from .digits import DigitVocab
from .spans import IGNORE_INDEX, number_spans, shift_targets


class _FullSoftmaxLoss(TokenLoss):
    def _prepare(self, logits, labels):
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise ValueError(f"expected logits [B, T, V] and labels [B, T], got {tuple(logits.shape)} "
                             f"and {tuple(labels.shape)}")
        targets = shift_targets(labels.to(logits.device)).reshape(-1)
        valid = targets != IGNORE_INDEX
        rows = torch.nonzero(valid).squeeze(1)
        logits2d = logits.reshape(-1, logits.shape[-1])[rows].float()  # [n_valid, V]
        return targets, rows, logits2d, targets[rows]

    def _stats(self, logits, labels):
        if self.vocab is None:
            return {}
        targets = shift_targets(labels.to(logits.device))
        dt = number_spans(targets, self.vocab)
        ids = torch.tensor(self.vocab.digit_ids, device=logits.device)
        zd = logits.detach().reshape(-1, logits.shape[-1])[dt.rows.unsqueeze(1), ids.unsqueeze(0)].float()
        return _digit_stats(zd, dt)


class MixCELoss(_FullSoftmaxLoss):
    """MixCE (Zhang et al., 2023): per token ``eta * ce + (1 - eta) * stopgrad(exp(-ce)) * ce``.
    ``aux`` is reported as the difference to plain CE."""

    name = "mixce"

    def __init__(self, vocab: DigitVocab | None, eta: float = 0.5):
        super().__init__(vocab)
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"MixCE eta must be in [0, 1], got {eta}")
        self.eta = float(eta)

    def __call__(self, logits, labels, num_items_in_batch=None, num_digits_in_batch=None) -> LossOutput:
        targets, _, logits2d, y = self._prepare(logits, labels)
        ce_tok = F.cross_entropy(logits2d, y, reduction="none")
        mix_tok = self.eta * ce_tok + (1.0 - self.eta) * torch.exp(-ce_tok).detach() * ce_tok
        denom = self._ce_denominator(targets.view(1, -1), num_items_in_batch)
        ce = ce_tok.sum() / denom
        loss = mix_tok.sum() / denom
        return LossOutput(loss=loss, ce=ce.detach(), aux=(loss - ce).detach(), stats=self._stats(logits, labels))

    def extra_repr(self) -> str:
        return f"eta={self.eta}"


class EMOLoss(_FullSoftmaxLoss):
    """EMO (Ren et al., 2024): earth mover distance with a cost from the frozen, row-normalised
    output embedding E at initialisation. Per token
    ``emo = 1 - <E[y], (q - stopgrad(q * onehot(y))) @ E>`` with q the full softmax, and
    ``loss = 0.5 * (ce + stopgrad(ce / emo) * emo)`` on the batch means.

    output_embeddings: ``[V, H]`` tensor (e.g. ``model.get_output_embeddings().weight``); copied,
    normalised and frozen at construction.
    """

    name = "emo"

    def __init__(self, vocab: DigitVocab | None, output_embeddings: torch.Tensor | None = None):
        super().__init__(vocab)
        if output_embeddings is None:
            raise ValueError("loss 'emo' needs the model's output embedding matrix: "
                             "build_loss('emo', tokenizer, model=model) or output_embeddings=<[V, H] tensor>")
        e = output_embeddings.detach().float().clone()
        self.embedding = e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def __call__(self, logits, labels, num_items_in_batch=None, num_digits_in_batch=None) -> LossOutput:
        targets, _, logits2d, y = self._prepare(logits, labels)
        E = self.embedding.to(logits2d.device)
        if E.shape[0] < logits2d.shape[1]:
            raise ValueError(f"EMO embedding has {E.shape[0]} rows but logits have {logits2d.shape[1]} columns")
        E = E[: logits2d.shape[1]]
        ce_tok = F.cross_entropy(logits2d, y, reduction="none")
        q = torch.softmax(logits2d, dim=-1)
        q_y = q.gather(1, y.unsqueeze(1))
        q_minus = q.scatter(1, y.unsqueeze(1), q_y - q_y.detach())  # q - stopgrad(q * onehot(y))
        emo_tok = 1.0 - ((q_minus @ E) * E[y]).sum(-1)
        denom = self._ce_denominator(targets.view(1, -1), num_items_in_batch)
        ce = ce_tok.sum() / denom
        emo = emo_tok.sum() / denom
        loss = 0.5 * (ce + (ce / emo.clamp_min(1e-12)).detach() * emo)
        return LossOutput(loss=loss, ce=ce.detach(), aux=(loss - ce).detach(), stats=self._stats(logits, labels))
