"""Resolve and verify the single-digit and "." token ids of a tokenizer.

The numeric losses act on the ten logits of the tokens "0".."9". Those ids are looked up in the
tokenizer itself and verified by a round trip (each digit encodes to exactly one token inside a
longer number, and that token decodes back to the digit), because a silent mismatch would train
the wrong logits without any error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .spans import DigitTargets, number_spans

DIGITS = "0123456789"


class TokenizerDigitError(ValueError):
    """The tokenizer cannot be used by a digit-level loss (e.g. it merges several digits)."""


@dataclass(frozen=True)
class DigitGather:
    """What a loss gathers of a batch, from its vocabulary (``vocab.gather``; the protocol ``DigitVocab`` and
    ``NumberVocab`` share, so the losses never ask which one they hold).

    digits: the digit targets (rows: flat target positions); rows ``[P]`` / cols ``[C]``: the logit entries to
    read, ``z = logits2d[rows][:, cols]``; ``finish(z, flat_targets)``: the ``[N, 10]`` digit logits of
    ``digits`` from ``z``, and the number-token view (``z``, the target ids at ``rows``, each digit's row in
    ``z``) for a term on number tokens -- None for single-digit tokens, where ``z`` is already the digit logits."""

    digits: DigitTargets
    rows: torch.Tensor
    cols: torch.Tensor
    finish: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, tuple | None]]


def _as_digit_logits(z: torch.Tensor, flat_targets: torch.Tensor) -> tuple[torch.Tensor, None]:
    return z, None


@dataclass(frozen=True)
class DigitVocab:
    """Token ids the numeric losses need.

    digit_ids: ten ids, ``digit_ids[k]`` is the token of the digit ``k``.
    dot_id: id of the bare "." token, or None when the tokenizer has none (then number spans are
        integer-only and decimals are weighted as separate integers).
    """

    digit_ids: tuple[int, ...]
    dot_id: int | None
    _cols: dict = field(default_factory=dict, compare=False, repr=False)  # device -> the digit ids there

    #: every digit is its own token (the protocol's question; ``NumberVocab.single_digit`` answers per tokenizer)
    single_digit = True

    def __post_init__(self):
        if len(self.digit_ids) != 10 or len(set(self.digit_ids)) != 10:
            raise TokenizerDigitError(f"need ten distinct digit ids, got {self.digit_ids}")
        if self.dot_id is not None and self.dot_id in self.digit_ids:
            raise TokenizerDigitError("the '.' id collides with a digit id")

    def digit_counts(self, targets: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` digits each target position carries: 1 at a digit token, 0 elsewhere (ignored included).
        The protocol both vocabularies share (``NumberVocab.digit_counts``: a number token's length)."""
        ids = torch.as_tensor(self.digit_ids, device=targets.device)
        return (targets.unsqueeze(-1) == ids).any(-1).long()

    def columns(self, device: torch.device | str) -> torch.Tensor:
        """The ten digit ids as a tensor on ``device`` (made once per device)."""
        key = str(device)
        if key not in self._cols:
            self._cols[key] = torch.tensor(self.digit_ids, dtype=torch.long, device=device)
        return self._cols[key]

    def gather(self, targets: torch.Tensor, vocab_size: int, float_spans: bool = True,
               dense: bool = False) -> DigitGather:
        """The digit targets of ``targets`` (``[B, T]``, shifted) and their ten digit columns; ``dense``: at every
        position, with a mask (the losses' sync-free form, ``DigitTargets.mask``)."""
        dt = number_spans(targets, self, float_spans=float_spans, dense=dense)
        return DigitGather(dt, dt.rows, self.columns(targets.device), _as_digit_logits)


_GROUPING_HELP = (
    "Digit-level losses need one token per digit, or numbers tokenised into pure digit tokens of 1..K "
    "digits (Llama-3 / DeepSeek-V3 style: build_loss then uses their digit marginals, "
    "numlearn.losses.numbers); loss=mle works with any tokenizer. Adding single-digit tokens "
    "(tokenizer.add_tokens) does not help: the pre-tokenizer still emits the grouped tokens, and "
    "forcing digits apart changes every number's tokenisation and the model's embeddings for it.")


class _RawTokenizer:
    """A ``tokenizers.Tokenizer`` seen through the three calls used here."""

    def __init__(self, tok):
        self._tok = tok
        self.name_or_path = "tokenizers.Tokenizer"
        self.unk_token_id = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": self._tok.encode(text, add_special_tokens=add_special_tokens).ids}

    def convert_tokens_to_ids(self, token):
        return self._tok.token_to_id(token)

    def decode(self, ids):
        return self._tok.decode(list(ids), skip_special_tokens=False)


def _adapt(tokenizer):
    if callable(tokenizer) and hasattr(tokenizer, "convert_tokens_to_ids") and hasattr(tokenizer, "decode"):
        return tokenizer
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "token_to_id") and hasattr(tokenizer, "decode"):
        return _RawTokenizer(tokenizer)  # tokenizers.Tokenizer
    raise TypeError(f"expected a Hugging Face tokenizer (transformers.PreTrainedTokenizerBase), a "
                    f"tokenizers.Tokenizer or a numlearn.losses.DigitVocab, got {type(tokenizer).__name__}")


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _single_token_id(tokenizer, ch: str) -> int | None:
    """Id of a vocabulary entry that decodes to exactly ``ch``, or None."""
    vocab_id = tokenizer.convert_tokens_to_ids(ch)
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(vocab_id, int) and vocab_id != unk and tokenizer.decode([vocab_id]).strip() == ch:
        return vocab_id
    # Fall back to encoding the character alone; SentencePiece may prepend a "▁" token.
    ids = [i for i in _encode(tokenizer, ch) if tokenizer.decode([i]).strip() != ""]
    if len(ids) == 1 and tokenizer.decode(ids).strip() == ch:
        return ids[0]
    return None


def digit_token_ids(tokenizer: Any) -> DigitVocab:
    """Return the verified digit and "." token ids of ``tokenizer``.

    ``tokenizer``: a ``transformers`` tokenizer or a raw ``tokenizers.Tokenizer``; a ``DigitVocab``
    (ids known already, no tokenizer package needed) is returned as it is. Raises TokenizerDigitError naming the problem when a digit has no single-token form or when
    numbers are tokenized into multi-digit pieces (Llama-3 / GPT-2 / DeepSeek-V3 style), which the
    digit-level losses do not support.
    """
    if isinstance(tokenizer, DigitVocab):
        return tokenizer
    tokenizer = _adapt(tokenizer)
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    ids = []
    for d in DIGITS:
        tid = _single_token_id(tokenizer, d)
        if tid is None:
            raise TokenizerDigitError(
                f"tokenizer {name!r} has no single token for the digit {d!r}. Tokenizers that split "
                "numbers into single digits: Qwen2.5, DeepSeek-Math, Llama-2/CodeLlama, Mistral, "
                "SmolLM2. " + _GROUPING_HELP
            )
        ids.append(tid)
    # Round trip inside real numbers: a tokenizer with multi-digit tokens passes the per-digit
    # lookup above (it has "7" in its vocabulary) but never emits it inside "1234567890".
    for probe in ("1234567890", "x 9876543210 y", "3.14159"):
        got = _encode(tokenizer, probe)
        digit_pieces = [tokenizer.decode([i]) for i in got if any(c.isdigit() for c in tokenizer.decode([i]))]
        multi = [p for p in digit_pieces if sum(c.isdigit() for c in p) > 1]
        if multi:
            raise TokenizerDigitError(
                f"tokenizer {name!r} merges several digits into one token (e.g. {multi[0]!r} in "
                f"{probe!r}). " + _GROUPING_HELP
            )
        expected = [ids[int(c)] for c in probe if c.isdigit()]
        seen = [i for i in got if i in ids]
        if seen != expected:
            raise TokenizerDigitError(
                f"tokenizer {name!r}: digits of {probe!r} do not encode to the resolved digit ids "
                f"{ids} (got {got}); a digit carries a prefix or is merged with other characters."
            )
    dot = _single_token_id(tokenizer, ".")
    if dot is not None and dot not in _encode(tokenizer, "3.5"):
        dot = None  # "." exists but is merged with digits in numbers; treat spans as integer-only
    return DigitVocab(tuple(ids), dot)
