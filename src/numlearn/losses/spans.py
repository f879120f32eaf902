"""Number spans and place weights, vectorised over the whole batch.

A number span is a maximal run of consecutive target positions whose tokens are digits or "."
inside one sequence (docs/method.md). Runs never cross a row boundary or an ignored (-100) position,
because both break the run. Everything below is tensor arithmetic on ``[B, T]`` index tensors;
there is no Python loop over spans, tokens or rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F


class DigitIds(Protocol):
    """What the span arithmetic reads of a vocabulary (``DigitVocab``): the ten digit ids and the "." id."""

    digit_ids: tuple[int, ...]
    dot_id: int | None

IGNORE_INDEX = -100
# Decay of fractional-digit weights in DEL's floating-point generalisation: w = FRACTION_DECAY^-(k+1).
FRACTION_DECAY = 1.02


@dataclass
class DigitTargets:
    """Digit target positions of a batch, flattened in row-major ``B*T`` order.

    rows:       [N] long, flat index (b * T + t) of each digit target.
    values:     [N] long, the target digit 0..9.
    del_weight: [N] float32, DEL place weight (``2r`` for integer digits, ``1.02^-(k+1)`` for the
                k-th position after the decimal point; docs/method.md).
    int_place:  [N] float32, place ``r`` (units 1, tens 2, ...) within a run of digits where "."
                breaks the run -- DIST2's integer place weight.
    mask:       None (compact: every row is a digit target), or ``[N]`` bool over every position of the
                batch (dense: ``rows`` is ``arange(B*T)``, the other fields are 0 where ``mask`` is False).
                The losses take the dense form: its shapes do not depend on the data, so the loss needs no
                host sync and compiles as one graph (issue 45); analysis (``digit_view``) takes the compact one.
    """

    rows: torch.Tensor
    values: torch.Tensor
    del_weight: torch.Tensor
    int_place: torch.Tensor
    mask: torch.Tensor | None = None

    @property
    def count(self) -> int:
        """The number of digit targets (a host sync in the dense form)."""
        return int(self.rows.numel()) if self.mask is None else int(self.mask.sum())

    def size(self) -> torch.Tensor:
        """The number of digit targets as an fp32 tensor on the rows' device (no sync)."""
        if self.mask is None:
            return torch.full((), float(self.rows.numel()), device=self.rows.device)
        return self.mask.sum().float()

    def masked(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (``[N]`` or ``[N, k]``) with its non-digit rows set to 0 (the dense form; as it is otherwise)."""
        if self.mask is None:
            return x
        m = self.mask if x.dim() == 1 else self.mask.view(-1, *([1] * (x.dim() - 1)))
        return torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))


def shift_targets(labels: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` unshifted labels -> ``[B, T]`` targets, position t predicting label t+1.

    The last position gets IGNORE_INDEX, as in Hugging Face's causal-LM loss; shifting the labels
    instead of the logits avoids a copy of the ``[B, T, V]`` logits.
    """
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def to_targets(labels: torch.Tensor, labels_shifted: bool = False, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """The targets of ``labels`` under either convention: ``labels_shifted=False`` (Hugging Face's:
    ``labels[t]`` is the token at t, so position t is trained on ``labels[t+1]``) shifts them;
    ``labels_shifted=True`` (ntloss's, and collators that return ``shift_labels``: ``labels[t]`` is
    already what position t predicts) takes them as they are.

    ``ignore_index``: the label of untrained positions, as in ``F.cross_entropy`` (e.g. -1, or the pad
    id); its positions become IGNORE_INDEX (-100), which is always ignored. Any other negative label is
    refused: it is no token id, and reading it as one gave a wrong loss silently."""
    if labels.dim() != 2:
        raise ValueError(f"expected labels [B, T], got {tuple(labels.shape)}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise ValueError(f"ignore_index must be an int (F.cross_entropy's convention), got {ignore_index!r}")
    if ignore_index != IGNORE_INDEX:
        labels = labels.masked_fill(labels == ignore_index, IGNORE_INDEX)
    bad = (labels < 0) & (labels != IGNORE_INDEX)
    if not (torch.compiler.is_compiling() or labels.is_meta or labels.device.type == "cpu"):
        # on an accelerator: checked on the device (no read back on the hot path); it fails at the next sync
        torch._assert_async(~bad.any(), f"labels hold negative ids other than {IGNORE_INDEX} and the loss's "
                            f"ignore_index ({ignore_index}): build the loss with ignore_index=<that id>, or map "
                            f"your padding label to {IGNORE_INDEX} first")
    elif not (torch.compiler.is_compiling() or labels.is_meta) and bool(bad.any()):
        ids = sorted({int(x) for x in labels[bad].unique()[:3]})
        raise ValueError(f"labels hold negative ids {ids}: numlearn ignores only {IGNORE_INDEX} (IGNORE_INDEX, "
                         f"F.cross_entropy's default ignore_index) and the loss's ignore_index ({ignore_index}); "
                         f"build the loss with ignore_index={ids[0]} (build_loss(..., ignore_index={ids[0]})), or "
                         f"map your padding label first, e.g. labels.masked_fill(labels == {ids[0]}, {IGNORE_INDEX})")
    return labels if labels_shifted else shift_targets(labels)


def _run_bounds(member: torch.Tensor, flat_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each position of a run of True values along dim 1: flat index of the run's first and
    last position. Values at non-member positions are meaningless."""
    prev = F.pad(member[:, :-1], (1, 0), value=False)
    nxt = F.pad(member[:, 1:], (0, 1), value=False)
    start = torch.where(member & ~prev, flat_idx, torch.full_like(flat_idx, -1))
    end = torch.where(member & ~nxt, flat_idx, torch.full_like(flat_idx, torch.iinfo(flat_idx.dtype).max))
    first = torch.cummax(start, dim=1).values
    last = torch.cummin(end.flip(1), dim=1).values.flip(1)
    return first, last


def digit_values(targets: torch.Tensor, vocab: DigitIds) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, T]`` targets -> (is_digit [B, T] bool, value [B, T] long; 0 where not a digit)."""
    # the ids made once per device where the vocabulary keeps them (DigitVocab.columns), not per call
    ids = vocab.columns(targets.device) if hasattr(vocab, "columns") else \
        torch.as_tensor(vocab.digit_ids, device=targets.device)
    eq = targets.unsqueeze(-1) == ids  # [B, T, 10], small
    return eq.any(-1), eq.to(torch.int8).argmax(-1).long()


def number_spans(
    targets: torch.Tensor,
    vocab: DigitIds,
    float_spans: bool = True,
    dense: bool = False,
) -> DigitTargets:
    """Locate digit targets and their place weights.

    targets: ``[B, T]`` long, already shifted (see ``shift_targets``), IGNORE_INDEX where not trained.
    float_spans: True -> "." inside a run joins integer and fraction (DEL's floating-point
        spans); False -> "." breaks runs, so every digit run is weighted as an integer.
    dense: the dense form (``DigitTargets.mask``: every position, no data-dependent shape), as the losses use it.

    Weights (docs/method.md): a span with its first "." at offset d > 0 gives integer digits
    ``2 * (d - offset)`` and the k-th position after the point ``1.02^-(k+1)`` (later "." tokens
    count as positions); a span without such a point gives ``2 * r`` with r counted in positions
    from the span's right end. A sentence-final "." after a number is a point at the end, so the
    integer weights are unchanged.
    """
    B, T = targets.shape
    is_digit, value = digit_values(targets, vocab)
    flat_idx = torch.arange(B * T, device=targets.device).view(B, T)

    # DIST2: "." always breaks a run; r counted from the run's right end.
    _, d_last = _run_bounds(is_digit, flat_idx)
    int_place = (d_last - flat_idx + 1).float()

    if float_spans and vocab.dot_id is not None:
        is_dot = targets == vocab.dot_id
        member = is_digit | is_dot
        s_first, s_last = _run_bounds(member, flat_idx)
        point_here = is_dot & member
        # First point of each span: a reverse cumulative min of point positions, restarted at each
        # span end, is the same as "next point at or after t" clipped to the span.
        big = torch.iinfo(flat_idx.dtype).max
        pt = torch.where(point_here, flat_idx, torch.full_like(flat_idx, big))
        next_pt = torch.cummin(pt.flip(1), dim=1).values.flip(1)
        # the first point of the span is the next point after the span start
        first_pt = torch.gather(next_pt, 1, (s_first - flat_idx[:, :1]).clamp(0, T - 1))
        # a span whose first "." is its first token (".25") has no decimal point
        has_pt = member & (first_pt <= s_last) & (first_pt > s_first)
        k = (flat_idx - first_pt).clamp_min(1).float()
        del_w = torch.where(
            has_pt,
            torch.where(
                flat_idx < first_pt,
                2.0 * (first_pt - flat_idx).float(),
                FRACTION_DECAY ** (-(k + 1.0)),
            ),
            2.0 * (s_last - flat_idx + 1).float(),
        )
    else:
        del_w = 2.0 * int_place

    mask = is_digit.reshape(-1)
    if dense:  # every position, zeros where no digit: no data-dependent shape
        zero = torch.zeros((), device=targets.device)
        return DigitTargets(rows=flat_idx.reshape(-1), values=value.reshape(-1),
                            del_weight=torch.where(mask, del_w.reshape(-1).float(), zero),
                            int_place=torch.where(mask, int_place.reshape(-1), zero), mask=mask)
    rows = torch.nonzero(mask, as_tuple=False).squeeze(-1)
    return DigitTargets(
        rows=rows,
        values=value.reshape(-1)[rows],
        del_weight=del_w.reshape(-1)[rows].float(),
        int_place=int_place.reshape(-1)[rows],
    )


def count_digit_targets(labels: torch.Tensor, vocab: DigitIds, labels_shifted: bool = False,
                        ignore_index: int = IGNORE_INDEX) -> int:
    """Number of digit targets in ``[B, T]`` labels (unshifted unless ``labels_shifted``): pass the
    sum over a whole optimizer step as ``num_digits_in_batch`` to get step-normalised numeric terms
    in your own loop (``numlearn.losses.step_counts`` does both counts)."""
    return int(vocab.digit_counts(to_targets(labels, labels_shifted, ignore_index)).sum())  # a NumberVocab: number tokens' digits


def count_targets(labels: torch.Tensor, labels_shifted: bool = False, ignore_index: int = IGNORE_INDEX) -> int:
    """Number of trained positions (targets neither -100 nor ``ignore_index``) in ``[B, T]`` labels: CE's
    denominator."""
    return int((to_targets(labels, labels_shifted, ignore_index) != IGNORE_INDEX).sum())


def example_ids(targets: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, T]`` id of the example (sequence) each target position belongs to.

    Without ``position_ids`` every row is one example: the id is the row. With them (packed or
    padding-free rows, ``position_ids`` restarting at 0 at each sequence's first token) the id is
    the row's k-th sequence, so an example is a sequence, not a packed row. The target at position
    t is token t+1's label, so it belongs to token t+1's sequence. Ids are unique within the batch
    (not consecutive)."""
    B, T = targets.shape
    row = torch.arange(B, device=targets.device).unsqueeze(1).expand(B, T)
    if position_ids is None:
        return row
    if position_ids.shape != targets.shape:
        raise ValueError(f"position_ids {tuple(position_ids.shape)} must match labels {tuple(targets.shape)}")
    seq = (position_ids.to(targets.device) == 0).long().cumsum(1)
    seq = F.pad(seq[:, 1:], (0, 1), mode="replicate") if seq.shape[1] > 1 else seq  # token t+1's sequence
    return row * (T + 1) + seq


def count_examples(labels: torch.Tensor, vocab: DigitIds | None = None, labels_shifted: bool = False,
                   position_ids: torch.Tensor | None = None, ignore_index: int = IGNORE_INDEX) -> tuple[int, int]:
    """(examples with a trained target, examples with a digit target) in ``[B, T]`` labels: the
    step's sums are the normalisers of ``ce_normalization="example_mean"`` and
    ``aux_normalization="example_mean"`` (``numlearn.losses.step_counts`` computes them)."""
    targets = to_targets(labels, labels_shifted, ignore_index)
    ex = example_ids(targets, position_ids)
    n_tok = int(distinct_examples(ex, targets != IGNORE_INDEX))
    if vocab is None:
        return n_tok, 0
    return n_tok, int(distinct_examples(ex, vocab.digit_counts(targets) > 0))


def example_id_bound(targets: torch.Tensor) -> int:
    """A bound on ``example_ids(targets, ...)``: every id is below ``B * (T + 1)`` (a shape, no data read)."""
    return int(targets.shape[0]) * (int(targets.shape[1]) + 1)


def _example_counts(keys: torch.Tensor, counted: torch.Tensor, size: int) -> torch.Tensor:
    """``[size]`` fp32: how many counted positions each example id has -- a scatter into a fixed-size table, so no
    ``unique`` (a data-dependent shape) and no host sync."""
    return torch.zeros(size, dtype=torch.float32, device=keys.device).scatter_add_(0, keys, counted.float())


def distinct_examples(ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """The number of distinct ``example_ids`` (``[B, T]``) at the positions ``where`` holds, as a tensor."""
    return (_example_counts(ids.reshape(-1), where.reshape(-1), example_id_bound(ids)) > 0).sum()


def per_example_weights(keys: torch.Tensor, where: torch.Tensor | None = None, size: int | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``[K]`` example ids of K positions -> (``[K]`` fp32 weight 1 / (counted positions of its example), 0 at
    a position ``where`` leaves out; the number of distinct examples among the counted positions, a tensor):
    summing ``weight * value`` gives the sum of per-example means. A scatter into a table of ``size`` slots
    (``example_id_bound``), no ``unique`` and no data-dependent shape, so no host sync; without ``size``,
    one read of the largest id."""
    counted = torch.ones_like(keys, dtype=torch.bool) if where is None else where
    if keys.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=keys.device), torch.zeros((), dtype=torch.long,
                                                                                  device=keys.device)
    cnt = _example_counts(keys, counted, int(keys.max()) + 1 if size is None else int(size))
    return counted.float() / cnt[keys].clamp_min(1.0), (cnt > 0).sum()
