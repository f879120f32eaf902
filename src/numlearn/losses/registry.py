"""``build_loss``: the one entry point that turns a loss name and its options into a callable."""

from __future__ import annotations

from typing import Any

from .base import TokenLoss
from .digits import digit_token_ids
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


def build_loss(name: str, tokenizer, model=None, **options: Any) -> TokenLoss:
    """Build the loss ``name`` for ``tokenizer``.

    ``options`` are the loss's keyword arguments (alpha, form, place_weights, float_spans,
    aux_normalization, tau, beta, variant, eta). ``model`` is needed only by ``emo`` (its output
    embedding). Unknown names or options raise ValueError listing what is valid.
    """
    key = str(name).lower()
    if key not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    cls = LOSSES[key]
    import inspect

    params = inspect.signature(cls.__init__).parameters
    valid = [p for p in params if p not in ("self", "vocab")]
    if "alpha" not in valid and "alpha" in options:
        # configs carry alpha for every loss (it names the run dir); it must be unset for these
        if options["alpha"] not in (None, 0, 0.0):
            raise ValueError(f"loss {key!r} has no weight alpha (got alpha={options['alpha']})")
        options = {k: v for k, v in options.items() if k != "alpha"}
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"loss {key!r} got unknown option(s) {unknown}; valid options: {valid}")
    # Token-level losses only need the digit ids for logging; they work with any tokenizer.
    if key in ("mixce", "emo"):
        try:
            vocab = digit_token_ids(tokenizer)
        except ValueError:
            vocab = None
    else:
        vocab = digit_token_ids(tokenizer)
    if key == "emo":
        if model is not None and "output_embeddings" not in options:
            options["output_embeddings"] = model.get_output_embeddings().weight
        return cls(vocab, **options)
    return cls(vocab, **options)
