"""Number-aware training losses: small callables built from a tokenizer.

    from numlearn.losses import build_loss
    loss_fn = build_loss("del", tokenizer, alpha=1.28)      # alpha: weight on the step scale
    out = loss_fn(logits, labels, step=None)   # logits [B, T, V], labels [B, T] unshifted; step: StepCounts
    # (labels_shifted=True for labels that already hold each position's target)
    out.loss.backward(); out.ce, out.aux, out.stats

This package imports nothing from the rest of numlearn.
"""

from .base import (
    AUX_NORMALIZATIONS,
    CE_NORMALIZATIONS,
    DigitLoss,
    LossOutput,
    TokenLoss,
    digit_summary,
    digit_view,
    effective_weight,
)
from .digits import DigitVocab, TokenizerDigitError, digit_token_ids
from .linear import LinearHead, LogitTransform
from .numbers import NumberVocab, number_token_vocab
from .numeric import DELLoss, Dist2Loss, MLELoss, NTLLoss
from .registry import LOSSES, LossCapabilities, build_loss, capabilities, register_loss, resolve_vocab
from .spans import (
    IGNORE_INDEX,
    DigitTargets,
    count_digit_targets,
    count_examples,
    count_targets,
    example_ids,
    number_spans,
    shift_targets,
    to_targets,
)
from .steps import StepCounts, backward_scale, step_counts
from .token_level import EMOLoss, MixCELoss

__all__ = [
    "AUX_NORMALIZATIONS", "DigitLoss", "register_loss", "CE_NORMALIZATIONS", "DELLoss", "DigitTargets", "DigitVocab", "Dist2Loss", "EMOLoss", "IGNORE_INDEX", "LOSSES",
    "LossOutput", "MLELoss", "MixCELoss", "NTLLoss", "TokenLoss", "TokenizerDigitError",
    "build_loss", "resolve_vocab", "count_digit_targets", "digit_summary", "digit_token_ids", "digit_view", "effective_weight", "number_spans",
    "shift_targets", "NumberVocab", "number_token_vocab", "LinearHead", "LogitTransform", "LossCapabilities", "capabilities", "StepCounts", "backward_scale", "count_examples", "count_targets", "example_ids", "step_counts", "to_targets",
]
