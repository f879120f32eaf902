"""Digit distributions from number tokens, for tokenizers that group digits (Llama-3, DeepSeek-V3,
o200k: tokens of 1-3 digits). docs/method.md, "Tokenizers that group digits".

* **Number tokens**: every vocabulary entry whose decoded text is a string of ASCII digits, of
  length 1..K (``number_token_vocab``), resolved by decoding and checked by round trips.
* **A target number token** ``t`` with digit string ``s`` of length ``L``: for each place
  ``j = 1..L`` the digit logit of class ``d`` is the log-sum-exp of the logits of the length-``L``
  number tokens whose ``j``-th digit is ``d``: ``zt[j, d] = logsumexp{ z[tau] : tau in C_L,
  tau[j] = d }``, so ``softmax(zt[j])`` is the marginal of the ``j``-th digit given "a number token
  of length L". With single-digit number tokens ``zt = z[digit ids]`` exactly, value and gradient.
* **Spans and place weights** come from the number, not the token: the digit strings of a run of
  number tokens (and "." tokens) are joined, and the weights of ``spans.number_spans`` are computed
  on that digit string ("12345" as "123" + "45": places 5..1 across both tokens).

Everything is vectorised over positions: the digit-level sequence is built with
``repeat_interleave``, and each ``zt`` block with one scatter of ``exp`` per place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from .digits import DigitGather, DigitVocab, TokenizerDigitError, _adapt, _encode, _single_token_id
from .spans import IGNORE_INDEX, DigitTargets, number_spans

_NUMBER = re.compile(r"[0-9]+")
# the digit logit of a class no number token of that length has at that place (Llama-3's 1-3 digit
# tokens cover every class; a vocabulary with gaps would otherwise give -inf, and 0 * -inf in a BCE)
MISSING = -1.0e4
PROBES = ("1234567", "3.14159", "1,024", "007", "-42", "x 9876543210 y", "2026")


@dataclass(frozen=True)
class NumberVocab:
    """Number tokens of a tokenizer: ``ids[i]`` decodes to the digit string ``strings[i]``.

    dot_id: the bare "." token (None: spans are integer-only). Built by ``number_token_vocab``, or
    by hand from ``{id: "digits"}`` for tests (``NumberVocab.from_strings``)."""

    ids: tuple[int, ...]
    strings: tuple[str, ...]
    dot_id: int | None = None
    _by_len: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_strings(cls, tokens: dict[int, str], dot_id: int | None = None) -> NumberVocab:
        bad = [s for s in tokens.values() if not _NUMBER.fullmatch(s)]
        if bad:
            raise ValueError(f"number tokens must be ASCII digit strings, got {bad[:3]}")
        items = sorted(tokens.items())
        return cls(tuple(i for i, _ in items), tuple(s for _, s in items), dot_id)

    @property
    def max_len(self) -> int:
        return max(len(s) for s in self.strings)

    @property
    def single_digit(self) -> bool:
        return self.max_len == 1

    def digit_counts(self, targets: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` digits of each target position's token (0: not a number token, or ignored): the
        protocol both vocabularies share (``DigitVocab.digit_counts``)."""
        size = max(max(self.ids), int(targets.max()) if targets.numel() else 0) + 1
        length_of, _ = self.lookup(size, targets.device)
        return torch.where(targets != IGNORE_INDEX, length_of[targets.clamp_min(0)], torch.zeros_like(targets))

    def by_length(self, length: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids ``[n_L]``, digit table ``[n_L, L]``) of the length-``L`` number tokens."""
        ids, table, _ = self._length_class(length, device)
        return ids, table

    def columns(self, length: int, device: torch.device | str) -> torch.Tensor:
        """``[n_L]``: where the length-``L`` number tokens sit in ``ids`` (the number columns)."""
        return self._length_class(length, device)[2]

    def _length_class(self, length: int, device):
        key = (length, str(device))
        if key not in self._by_len:
            sel = [(k, i, s) for k, (i, s) in enumerate(zip(self.ids, self.strings)) if len(s) == length]
            ids = torch.tensor([i for _, i, _ in sel], dtype=torch.long, device=device)
            table = torch.tensor([[int(c) for c in s] for _, _, s in sel], dtype=torch.long, device=device)
            cols = torch.tensor([k for k, _, _ in sel], dtype=torch.long, device=device)
            self._by_len[key] = (ids, table.reshape(len(sel), length), cols)
        return self._by_len[key]

    def values_tensor(self, device: torch.device | str) -> torch.Tensor:
        """``[n]`` fp32: each number token's integer value, in the order of ``ids`` ("007" is 7)."""
        key = ("values", str(device))
        if key not in self._by_len:
            self._by_len[key] = torch.tensor([float(int(s)) for s in self.strings], device=device)
        return self._by_len[key]

    def gather(self, targets: torch.Tensor, vocab_size: int, float_spans: bool = True,
               dense: bool = False) -> DigitGather:
        """The digit targets of ``targets`` (``[B, T]``, shifted: each number token expanded to its digits) and
        the number-token columns of the positions that hold them, whose digit marginals are the digit logits.
        Always the compact form (``dense`` is accepted for the shared protocol: a number token's digits have no
        fixed place in the batch)."""
        nt = number_targets(targets, self, vocab_size, float_spans=float_spans)
        pos, inv = torch.unique_consecutive(nt.digits.rows, return_inverse=True)

        def finish(z: torch.Tensor, flat_targets: torch.Tensor):
            return number_digit_logits(z, nt, self, row_index=inv), (z, flat_targets[pos], inv)
        return DigitGather(nt.digits, pos, self.ids_tensor(targets.device), finish)

    def ids_tensor(self, device: torch.device | str) -> torch.Tensor:
        key = ("ids", str(device))
        if key not in self._by_len:
            self._by_len[key] = torch.tensor(self.ids, dtype=torch.long, device=device)
        return self._by_len[key]

    def lookup(self, vocab_size: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """(length ``[V]``: the digit count of each token, 0 if not a number token; slot ``[V]``: its
        row in ``by_length(length)``)."""
        key = ("lookup", vocab_size, str(device))
        if key not in self._by_len:
            length = torch.zeros(vocab_size, dtype=torch.long)
            slot = torch.zeros(vocab_size, dtype=torch.long)
            seen: dict[int, int] = {}
            for i, s in zip(self.ids, self.strings):
                if i < vocab_size:
                    length[i] = len(s)
                    slot[i] = seen.get(len(s), 0)
                seen[len(s)] = seen.get(len(s), 0) + 1
            self._by_len[key] = (length.to(device), slot.to(device))
        return self._by_len[key]


def number_token_vocab(tokenizer: Any) -> NumberVocab:
    """The number tokens of ``tokenizer`` (every entry decoding to 1..K ASCII digits) and its "."
    token, checked on real numbers: each digit of the probes must come out inside a pure number
    token. A tokenizer whose numbers come out in tokens with a leading space or mixed with other
    characters gets TokenizerDigitError naming those tokens."""
    if isinstance(tokenizer, NumberVocab):
        return tokenizer
    tok = _adapt(tokenizer)
    name = getattr(tok, "name_or_path", type(tok).__name__)
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else tokenizer.get_vocab_size()
    numbers: dict[int, str] = {}
    for i in range(size):
        text = tok.decode([i])
        if _NUMBER.fullmatch(text):
            numbers[i] = text
    if not numbers:
        raise TokenizerDigitError(f"tokenizer {name!r} has no token that decodes to digits alone")
    for probe in PROBES:
        pieces = [tok.decode([i]) for i in _encode(tok, probe)]
        mixed = [p for p in pieces if any(c.isdigit() for c in p) and not _NUMBER.fullmatch(p)]
        if mixed:
            raise TokenizerDigitError(
                f"tokenizer {name!r} writes digits of {probe!r} in tokens that are not digit strings: {mixed} "
                "(a leading space or other characters in a number token); the number-token losses need "
                "numbers tokenised into pure digit tokens")
        if "".join(p for p in pieces if _NUMBER.fullmatch(p)) != "".join(c for c in probe if c.isdigit()):
            raise TokenizerDigitError(f"tokenizer {name!r}: the digits of {probe!r} do not round-trip through "
                                      f"its number tokens ({pieces})")
    dot = _single_token_id(tok, ".")
    if dot is not None and dot not in _encode(tok, "3.5"):
        dot = None
    return NumberVocab.from_strings(numbers, dot)


@dataclass(frozen=True)
class NumberTargets:
    """Digit targets of number tokens, one row per digit (``digits`` is a ``DigitTargets`` whose
    ``rows`` are the flat ``B*T`` position of the digit's token), with each digit's place ``place``
    within its token and the token's digit count ``length``."""

    digits: DigitTargets
    place: torch.Tensor
    length: torch.Tensor

    @property
    def count(self) -> int:
        return self.digits.count


def number_targets(targets: torch.Tensor, nv: NumberVocab, vocab_size: int, float_spans: bool = True
                   ) -> NumberTargets:
    """The digit targets of ``targets`` (``[B, T]``, shifted, IGNORE_INDEX where not trained): every
    number token expanded to its digits, with the place weights of the whole number's digit string."""
    B, T = targets.shape
    dev = targets.device
    length_of, slot_of = nv.lookup(vocab_size, dev)
    safe = targets.clamp(0, vocab_size - 1)
    valid = targets != IGNORE_INDEX
    tok_len = torch.where(valid, length_of[safe], torch.zeros_like(targets))  # [B, T] digits per token
    is_dot = valid & (targets == nv.dot_id) if nv.dot_id is not None else torch.zeros_like(valid)
    # the digit-level sequence: each number token becomes its digits, a "." one "." and anything else
    # one separator; ids there: digits 0..9, "." 10, separator 11
    n_char = torch.where(tok_len > 0, tok_len, torch.ones_like(tok_len))
    flat_n = n_char.reshape(-1)
    tok_of_char = torch.repeat_interleave(torch.arange(B * T, device=dev), flat_n)
    start = torch.cumsum(flat_n, 0) - flat_n
    place = torch.arange(tok_of_char.numel(), device=dev) - start[tok_of_char]  # digit index within its token
    row_of_char = tok_of_char // T
    row_start = torch.cumsum(n_char.sum(1), 0) - n_char.sum(1)
    col = torch.arange(tok_of_char.numel(), device=dev) - row_start[row_of_char]
    L = tok_len.reshape(-1)[tok_of_char]
    char_val = torch.full_like(tok_of_char, 11)
    num = L > 0
    if num.any():
        for length in sorted(set(L[num].tolist())):
            sel = num & (L == length)
            _, table = nv.by_length(length, dev)
            char_val[sel] = table[slot_of[safe.reshape(-1)[tok_of_char[sel]]], place[sel]]
    char_val[is_dot.reshape(-1)[tok_of_char]] = 10
    width = int(n_char.sum(1).max()) if B * T else 0
    chars = torch.full((B, max(width, 1)), 11, dtype=torch.long, device=dev)
    chars[row_of_char, col] = char_val
    dt = number_spans(chars, DigitVocab(tuple(range(10)), 10), float_spans=float_spans)
    # char flat index -> the char's token
    char_index = row_of_char * chars.shape[1] + col
    to_char = torch.full((B * chars.shape[1],), -1, dtype=torch.long, device=dev)
    to_char[char_index] = torch.arange(char_index.numel(), device=dev)
    c = to_char[dt.rows]
    digits = DigitTargets(rows=tok_of_char[c], values=dt.values, del_weight=dt.del_weight, int_place=dt.int_place)
    return NumberTargets(digits, place[c], L[c])


def digit_counts(targets: torch.Tensor, nv: NumberVocab) -> torch.Tensor:
    """``[B, T]`` digits of each target position's token (0: not a number token, or ignored):
    ``nv.digit_counts(targets)``."""
    return nv.digit_counts(targets)


def number_digit_logits(logits2d: torch.Tensor, nt: NumberTargets, nv: NumberVocab,
                        row_index: torch.Tensor | None = None) -> torch.Tensor:
    """``[N, 10]`` digit logits of the digit targets ``nt``: row ``i`` is ``zt[place_i, :]`` of its
    token's length class. ``logits2d``: the full ``[B*T, V]`` logits (``row_index`` None), or only
    the number columns ``[P, len(nv.ids)]`` of P positions, digit ``i``'s token being row
    ``row_index[i]``. Differentiable; exact (``z[digit ids]``) where every number token is one digit."""
    if nt.count == 0:
        return logits2d.new_zeros((0, 10), dtype=torch.float32)
    dev = logits2d.device
    pieces = []
    for length in sorted(set(nt.length.tolist())):
        sel = torch.nonzero(nt.length == length).squeeze(1)
        ids, table = nv.by_length(length, dev)
        if row_index is None:
            zn = logits2d[nt.digits.rows[sel]][:, ids].float()  # [n, n_L]
        else:
            zn = logits2d[row_index[sel]][:, nv.columns(length, dev)].float()
        bins = table[:, nt.place[sel]].T  # [n, n_L]: the digit of each candidate at this row's place
        m = torch.full((len(sel), 10), float("-inf"), device=dev, dtype=zn.dtype)
        m = m.scatter_reduce(1, bins, zn.detach(), "amax", include_self=True)
        e = torch.exp(zn - m.gather(1, bins))
        s = torch.zeros((len(sel), 10), device=dev, dtype=zn.dtype).scatter_add(1, bins, e)
        zt = torch.where(s > 0, torch.log(s.clamp_min(torch.finfo(s.dtype).tiny)) + m.clamp_min(MISSING),
                         torch.full_like(s, MISSING))
        pieces.append((sel, zt))
    return torch.cat([p for _, p in pieces])[torch.argsort(torch.cat([sel for sel, _ in pieces]))]
