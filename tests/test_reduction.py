"""``reduction`` and per-token ``loss_weights`` (issue 44, item 6): each against a reference written from
``F.cross_entropy(reduction="none")`` and the loss's per-digit term, on the logits and the fused
hidden-state paths, over a step of two micro-batches (gradient accumulation) -- the step's sum of
micro-batch losses must be the one-big-batch objective ``sum_t w_t ce_t / N_tokens + alpha * sum_d w_d
term_d / N_digits`` in value and in gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from numlearn.losses import DigitVocab, build_loss, digit_view, shift_targets, step_counts

VOCAB = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)
V, H = 16, 8
NUMERIC = ["mle", "ntl", "dist2", "del"]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([[-100, 3, 4, 10, 5, 12, 7, 1],
                           [-100, -100, 2, 13, 9, 9, 10, 4],
                           [-100, 6, 6, 11, 14, 8, -100, -100],
                           [-100, 1, 0, 0, 15, 3, 2, -100]])
    weights = torch.rand(labels.shape, generator=g) * 2  # per label, aligned with labels
    hidden = torch.randn(4, 8, H, generator=g)
    W = torch.randn(V, H, generator=g)
    return labels, weights, hidden, W


def _reference(fn, hidden, W, labels, weights, reduction):
    """The one-big-batch objective by hand: per-position CE from F.cross_entropy, the loss's per-digit term
    on the digit logits, both times the label's weight, over the step's counts (1 for "sum")."""
    logits = hidden @ W.T
    t = shift_targets(labels)
    w = F.pad(weights[:, 1:], (0, 1), value=0.0)  # the weight of the label each position is trained on
    ce_tok = F.cross_entropy(logits.reshape(-1, V), t.reshape(-1), ignore_index=-100, reduction="none")
    n_tok = float((t != -100).sum())
    ce = (ce_tok * w.reshape(-1)).sum()
    zd, dt = digit_view(logits, labels, VOCAB)
    zd = (logits.reshape(-1, V)[dt.rows][:, :10]).float()  # the same columns, with a gradient
    aux = torch.zeros(())
    if fn.alpha > 0:
        aux = fn.alpha * (fn.digit_term(zd, dt) * w.reshape(-1)[dt.rows]).sum()
    if reduction == "sum":
        return ce + aux
    if reduction == "none":  # [B, T]: each position's CE and its digit's term, over the counts
        per = ce_tok * w.reshape(-1) / n_tok
        if fn.alpha > 0:
            per = per.index_add(0, dt.rows, fn.alpha * fn.digit_term(zd, dt) * w.reshape(-1)[dt.rows] / dt.count)
        return per.view(labels.shape)
    return ce / n_tok + aux / max(dt.count, 1)


def _step(fn, hidden, W, labels, weights, fused):
    """The losses of the step's two micro-batches (rows 0-1 and 2-3) with the step's counts, summed."""
    counts = step_counts([labels[:2], labels[2:]], fn)
    total = 0.0
    for sl in (slice(0, 2), slice(2, 4)):
        kw = dict(step=counts, loss_weights=weights[sl])
        out = fn.from_hidden(hidden[sl], W, labels[sl], **kw) if fused else fn(hidden[sl] @ W.T, labels[sl], **kw)
        total = total + out.loss.sum()
    return total


@pytest.mark.parametrize("fused", [False, True], ids=["logits", "from_hidden"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", NUMERIC)
def test_reduction_and_loss_weights_match_the_reference_under_accumulation(name, reduction, fused):
    labels, weights, hidden, W = _batch()
    fn = build_loss(name, VOCAB, reduction=reduction, **({} if name == "mle" else {"alpha": 0.7}))
    h1, W1 = hidden.clone().requires_grad_(), W.clone().requires_grad_()
    got = _step(fn, h1, W1, labels, weights, fused)
    got.backward()
    h2, W2 = hidden.clone().requires_grad_(), W.clone().requires_grad_()
    ref = _reference(fn, h2, W2, labels, weights, reduction).sum()  # "none": the per-position sum
    ref.backward()
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    assert torch.allclose(h1.grad, h2.grad, atol=1e-5) and torch.allclose(W1.grad, W2.grad, atol=1e-5)


@pytest.mark.parametrize("fused", [False, True], ids=["logits", "from_hidden"])
def test_reduction_none_is_per_position_and_sums_to_the_mean(fused):
    """``none``: a ``[B, T]`` tensor in target alignment; a position without a target is 0, a non-digit
    target carries its CE only (by hand: F.cross_entropy / N_tokens), and the sum is the ``mean`` loss."""
    labels, weights, hidden, W = _batch()
    kw = {"alpha": 0.7}
    mean_fn, none_fn = build_loss("del", VOCAB, **kw), build_loss("del", VOCAB, reduction="none", **kw)
    call = (lambda f: f.from_hidden(hidden, W, labels)) if fused else (lambda f: f(hidden @ W.T, labels))
    per, mean = call(none_fn).loss, call(mean_fn).loss
    assert per.shape == labels.shape and float(per.sum()) == pytest.approx(float(mean), rel=1e-6)
    t = shift_targets(labels)
    assert float(per[0, 7]) == 0.0 and float(per[2, 5]) == 0.0  # no target there
    n_tok = float((t != -100).sum())
    ce_04 = F.cross_entropy((hidden[0, 4] @ W.T).unsqueeze(0), t[0, 4:5])  # target 12: not a digit
    assert float(per[0, 4]) == pytest.approx(float(ce_04) / n_tok, rel=1e-5)
    # a backward through the user's own weighting of the per-position losses (the fused path recomputes its
    # chunks with the per-row upstream gradient) gives what plain autograd gives through the reference
    u = torch.arange(1.0, 9.0).expand(4, 8)
    h, w = hidden.clone().requires_grad_(), W.clone().requires_grad_()
    out = none_fn.from_hidden(h, w, labels) if fused else none_fn(h @ w.T, labels)
    (out.loss * u).sum().backward()
    h_ref, w_ref = hidden.clone().requires_grad_(), W.clone().requires_grad_()
    ref = _reference(none_fn, h_ref, w_ref, labels, torch.ones_like(weights), "none")
    (ref * u).sum().backward()
    assert torch.allclose(out.loss.detach(), ref.detach(), atol=1e-6)
    assert torch.allclose(h.grad, h_ref.grad, atol=1e-5) and torch.allclose(w.grad, w_ref.grad, atol=1e-5)


def test_zero_weights_drop_positions_and_bad_weights_are_refused():
    labels, weights, hidden, W = _batch()
    fn = build_loss("del", VOCAB, alpha=0.7, reduction="sum")
    logits = hidden @ W.T
    ones = fn(logits, labels, loss_weights=torch.ones_like(weights)).loss
    assert float(ones) == pytest.approx(float(fn(logits, labels).loss), rel=1e-6)  # weight 1 = no weights
    zero_row = torch.ones_like(weights)
    zero_row[1] = 0.0
    dropped = fn(logits, labels, loss_weights=zero_row).loss
    assert float(dropped) == pytest.approx(float(fn(logits[[0, 2, 3]], labels[[0, 2, 3]]).loss), rel=1e-6)
    with pytest.raises(ValueError, match="loss_weights must be a tensor shaped like labels"):
        fn(logits, labels, loss_weights=weights[:, :-1])
    with pytest.raises(ValueError, match="finite and >= 0"):
        fn(logits, labels, loss_weights=-weights)
    with pytest.raises(ValueError, match=r"reduction='avg'; choose one of"):
        build_loss("del", VOCAB, alpha=0.7, reduction="avg")
    with pytest.raises(ValueError, match="normalises its own token loss"):
        build_loss("mixce", VOCAB, reduction="none")
    with pytest.raises(ValueError, match="normalises its own token loss"):
        build_loss("mixce", VOCAB)(logits, labels, loss_weights=weights)
