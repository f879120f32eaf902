"""``build_loss``: the one entry point that turns a loss name and its options into a callable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .base import DigitLoss, TokenLoss, check_aux_normalization, check_ce_normalization, check_reduction
from .digits import DigitVocab, TokenizerDigitError, digit_token_ids
from .numbers import NumberVocab, number_token_vocab
from .numeric import DELLoss, Dist2Loss, MLELoss, NTLLoss
from .token_level import EMOLoss, MixCELoss

LOSSES: dict[str, type[TokenLoss]] = {
    "mle": MLELoss,
    "ntl": NTLLoss,
    "dist2": Dist2Loss,
    "del": DELLoss,
    "mixce": MixCELoss,
    "emo": EMOLoss,
}


def register_loss(name: str, cls: type[TokenLoss]) -> type[TokenLoss]:
    """Make ``cls`` buildable as ``build_loss(name, ...)`` and ``loss=<name>`` (with a ``conf/loss/<name>.yaml``):
    the one line a new loss needs besides its class (docs/extending.md). Usable as a decorator argument's
    return; a name already taken by another class is refused."""
    key = str(name).lower()
    if not (isinstance(cls, type) and issubclass(cls, TokenLoss)):
        raise TypeError(f"register_loss({name!r}, ...): a TokenLoss subclass (e.g. DigitLoss with a digit_term)")
    if LOSSES.get(key, cls) is not cls:
        raise ValueError(f"loss {key!r} is already registered ({LOSSES[key].__name__}); choose another name")
    LOSSES[key] = cls
    return cls


@dataclass(frozen=True)
class LossCapabilities:
    """What a loss can do, from its class's declarations (``TokenLoss``)."""

    name: str
    linear_form: bool  # from_hidden: the fused linear loss, no [B, T, V] logits
    needs_digit_vocab: bool  # refuses a tokenizer without single-digit tokens
    needs_model_embeddings: bool  # bind_model(model) before the first step
    numeric_term: bool  # a weighted numeric term (alpha): the step's digit count matters


def capabilities(name: str) -> LossCapabilities:
    key = str(name).lower()
    if key not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    cls = LOSSES[key]
    import inspect

    weighted = "alpha" in inspect.signature(cls.__init__).parameters
    return LossCapabilities(key, bool(cls.has_linear_form), bool(cls.needs_digit_vocab),
                            bool(cls.needs_model_embeddings), weighted)


def resolve_vocab(tokenizer: Any) -> DigitVocab | NumberVocab:
    """The digit vocabulary of ``tokenizer``: its single-digit tokens, or, where digits are grouped
    into number tokens of 1..K digits (Llama-3, DeepSeek-V3), the number tokens whose digit
    marginals stand in for them. ``TokenizerDigitError`` names the problem when it has neither."""
    try:
        return digit_token_ids(tokenizer)
    except TokenizerDigitError as single:
        if isinstance(tokenizer, DigitVocab):
            raise
        try:  # digits grouped into number tokens of 1..K digits: their digit marginals
            return number_token_vocab(tokenizer)
        except TokenizerDigitError as grouped:
            raise TokenizerDigitError(f"{single} Number tokens: {grouped}") from None


def build_loss(name: str, tokenizer: Any, model: torch.nn.Module | None = None, **options: Any) -> TokenLoss:
    """Build the loss ``name`` for ``tokenizer`` (or a ``DigitVocab`` holding the digit ids).

    ``options`` are the loss's keyword arguments (alpha, form, place_weights, float_spans,
    aux_normalization, ce_normalization, tau, beta, variant, eta), and, for every loss, ``ignore_index``:
    the label of untrained positions besides -100 (``F.cross_entropy``'s convention, e.g. -1); ``reduction``
    (``"mean"``, ``"sum"``, ``"none"``: ``numlearn.losses.base.REDUCTIONS``; mle, ntl, dist2, del). ``model`` is used only by ``emo`` (its output
    embedding); without it the EMO loss is built unbound -- every option checked -- and
    ``loss.bind_model(model)`` must be called before the first step. Unknown names, unknown
    options and missing weights raise ValueError listing what is valid.
    """
    key = str(name).lower()
    if key not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    cls = LOSSES[key]
    import inspect

    ignore_index = options.pop("ignore_index", None)
    reduction = check_reduction(options.pop("reduction", None) or "mean")
    if reduction != "mean" and not issubclass(cls, DigitLoss):
        raise ValueError(f"loss {key!r} normalises its own token loss: reduction={reduction!r} is available for "
                         "mle, ntl, dist2 and del")
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        raise ValueError(f"ignore_index must be an int (the label of untrained positions), got {ignore_index!r}")
    params = inspect.signature(cls.__init__).parameters
    valid = [p for p in params if p not in ("self", "vocab")]
    if "alpha" not in valid and "alpha" in options:
        # configs carry alpha for every loss (it names the run dir); it must be unset for these
        if options["alpha"] not in (None, 0, 0.0):
            raise ValueError(f"loss {key!r} has no weight alpha (got alpha={options['alpha']})")
        options = {k: v for k, v in options.items() if k != "alpha"}
    if "aux_normalization" not in valid and "aux_normalization" in options:
        # presets set the normalisation for whichever loss is chosen; it means nothing here
        check_aux_normalization(options.pop("aux_normalization"))
    if "ce_normalization" in options and options["ce_normalization"] is None:
        options.pop("ce_normalization")  # configs: null = the loss's default ("token")
    if "ce_normalization" not in valid and "ce_normalization" in options:
        value = check_ce_normalization(options.pop("ce_normalization"))
        if value != "token":
            raise ValueError(f"loss {key!r} normalises its own token loss: ce_normalization={value!r} is available "
                             "for mle, ntl, dist2 and del only (set loss.ce_normalization=token to run it on the "
                             "step's token mean)")
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"loss {key!r} got unknown option(s) {unknown}; valid options: {valid + ['ignore_index', 'reduction']}")
    required = [p for p in valid if params[p].default is inspect.Parameter.empty]
    missing = [p for p in required if options.get(p) is None]
    if missing:
        raise ValueError(f"loss {key!r} needs {missing} (alpha: the weight of the numeric term, relative to "
                         "the step's digit-mean term; numlearn.losses.effective_weight converts the official "
                         "scripts' weights)")
    # Losses without a digit term only need the digit ids for logging; they work with any tokenizer.
    if not cls.needs_digit_vocab:
        try:
            vocab = digit_token_ids(tokenizer)
        except ValueError:
            vocab = None
    else:
        vocab = resolve_vocab(tokenizer)
    loss = cls(vocab, **options)
    if ignore_index is not None:
        loss.ignore_index = int(ignore_index)
    loss.reduction = reduction
    if cls.needs_model_embeddings and model is not None and getattr(loss, "embedding", None) is None:
        loss.bind_model(model)
    return loss
