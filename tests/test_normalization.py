"""Example-weighted normalisations (issue 25): ``aux_normalization="example_mean"`` (each example's
digit mean counts equally) and ``ce_normalization="example_mean"`` (each example's token mean counts
equally), pack-aware and invariant to how the step is split into micro-batches and processes.

The authors' harnesses, read from PolyU-VCLab/DEL: both run per-device batch 1, so a micro-batch is
one example. ``train-qwen-deepseek.py`` (OQ) adds ``alpha * mean over the example's digits`` of every
micro-batch (the Trainer sums GA x W of them); its CE is the step's token mean (transformers 4.57
passes ``num_items_in_batch``). ``train-codellama-mistral.py`` (OL) takes each micro-batch's token
mean and DEL mean and averages both over GA x W (transformers 4.35: accelerate divides by GA, DDP
averages processes). The independent computations below follow those definitions one example at a
time, with plain ``F.cross_entropy`` and a per-example loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from numlearn.losses import (
    IGNORE_INDEX,
    DigitVocab,
    LinearHead,
    StepCounts,
    build_loss,
    count_examples,
    example_ids,
    step_counts,
)

VOCAB = DigitVocab(tuple(range(10)), 10)  # digit k is id k, "." is 10; ids 11.. are letters
V = 16
# four examples with very different digit counts (as unshifted labels; -100 = prompt / padding)
EXAMPLES = [
    [11, 12, 3, 13],                               # 1 digit target
    [11, 1, 2, 3, 4, 5, 6, 7, 8, 14],              # 8 digits
    [12, 13, 14, 15, 11, 9, 13],                   # 1 digit
    [11, 4, 2, 10, 5, 13, 7, 7, 12],               # 5 digits (a decimal)
]


def _pad(rows, value):
    T = max(map(len, rows))
    return torch.tensor([r + [value] * (T - len(r)) for r in rows])


def _logits(seed, shape):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, V, generator=g) * 2).requires_grad_()


def test_example_ids_rows_and_packed_sequences():
    t = torch.zeros(2, 4, dtype=torch.long)
    assert example_ids(t).tolist() == [[0, 0, 0, 0], [1, 1, 1, 1]]
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2]])
    # the target at position t is token t+1's label: position 2 predicts token 3, the second sequence's first
    ids = example_ids(torch.zeros(1, 8, dtype=torch.long), pos)[0].tolist()
    assert ids[0] == ids[1] != ids[2] == ids[3] != ids[4] == ids[5] == ids[6] == ids[7] != ids[0]


def test_count_examples_counts_sequences_not_rows():
    packed = torch.tensor([[11, 3, 13, 11, 12, 13, 11, 5, 6]])
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 0, 1, 2]])
    packed_labels = packed.clone()
    packed_labels[0, [0, 3, 6]] = IGNORE_INDEX  # each sequence's first label masked, as the packers do
    assert count_examples(packed_labels, VOCAB, position_ids=pos) == (3, 2)  # 3 trained, 2 with digits
    assert count_examples(packed_labels, VOCAB) == (1, 1)  # without position_ids: one row, one example


def _oq_aux(loss_name, logits, labels, alpha):
    """OQ at batch 1: alpha x each example's own digit mean, summed; here the mean over the examples
    with digits (the per-example loss called alone on its own digits is that example's digit mean)."""
    fn = build_loss(loss_name, VOCAB, alpha=alpha)
    means = [fn(logits[i : i + 1], labels[i : i + 1]).aux for i in range(labels.shape[0])]
    return torch.stack(means).sum()


@pytest.mark.parametrize("loss", ["del", "ntl", "dist2"])
def test_aux_example_mean_is_the_mean_of_per_example_digit_means(loss):
    labels = _pad(EXAMPLES, IGNORE_INDEX)
    logits = _logits(0, labels.shape)
    out = build_loss(loss, VOCAB, alpha=1.28, aux_normalization="example_mean")(logits, labels)
    # every example has digits: 1.28 x the mean over the 4 examples = OQ with alpha 1.28 / 4 each
    torch.testing.assert_close(out.aux, _oq_aux(loss, logits, labels, 1.28 / 4).detach())
    step = build_loss(loss, VOCAB, alpha=1.28)(logits, labels)
    assert abs(float(step.aux) - float(out.aux)) > 1e-3 * abs(float(out.aux))  # a different objective


def test_aux_example_mean_hand_values():
    """DIST2 with tau 1 and place weights off on one-hot-ish logits: each digit's term is known."""
    labels = _pad([[11, 3, 13], [11, 1, 2, 3, 13]], IGNORE_INDEX)
    logits = torch.zeros(*labels.shape, V)
    out = build_loss("del", VOCAB, alpha=1.0, place_weights="none", aux_normalization="example_mean")(logits, labels)
    # uniform digit logits: every digit's DEL term is the same number c, so each example's mean is c
    # and the mean of means is c -- while the per-digit weights differ (1/1 vs 1/3)
    c = build_loss("del", VOCAB, alpha=1.0, place_weights="none")(logits[:1], labels[:1]).aux
    torch.testing.assert_close(out.aux, c)
    logits[1, 1:4, 3] = 4.0  # example 2's digit positions: a confident wrong guess, term larger
    per = [build_loss("del", VOCAB, alpha=1.0, place_weights="none")(logits[i : i + 1], labels[i : i + 1]).aux
           for i in (0, 1)]
    out = build_loss("del", VOCAB, alpha=1.0, place_weights="none", aux_normalization="example_mean")(logits, labels)
    torch.testing.assert_close(out.aux, (per[0] + per[1]) / 2)


def test_ce_example_mean_is_the_mean_of_per_example_token_means():
    labels = _pad(EXAMPLES, IGNORE_INDEX)
    logits = _logits(1, labels.shape)
    out = build_loss("mle", VOCAB, ce_normalization="example_mean")(logits, labels)
    per = [F.cross_entropy(logits[i, :-1], labels[i, 1:], ignore_index=IGNORE_INDEX) for i in range(4)]
    torch.testing.assert_close(out.ce, torch.stack(per).mean().detach())
    token = build_loss("mle", VOCAB)(logits, labels)
    assert abs(float(token.ce) - float(out.ce)) > 1e-4


@pytest.mark.parametrize("fused", [False, True])
def test_packed_rows_equal_padded_rows(fused):
    """An example is a sequence, not a packed row: the four examples packed into two rows (with
    restarting position_ids) give the padded batch's loss and gradient."""
    torch.manual_seed(0)
    H = 8
    W = torch.randn(V, H, requires_grad=True)
    emb = torch.randn(V, H)
    fn = build_loss("del", VOCAB, alpha=1.28, aux_normalization="example_mean", ce_normalization="example_mean")

    def run(ids, labels, pos):
        W.grad = None
        h = emb[ids.clamp_min(0)]
        if fused:
            out = fn.from_hidden(h, LinearHead(W, chunk_size=5), labels, position_ids=pos)
        else:
            out = fn(h @ W.T, labels, position_ids=pos)
        out.loss.backward()
        return out.loss.detach(), W.grad.clone()

    padded = _pad(EXAMPLES, IGNORE_INDEX)
    loss_a, g_a = run(padded, padded, None)
    rows = [EXAMPLES[0] + EXAMPLES[1], EXAMPLES[2] + EXAMPLES[3]]
    packed = _pad(rows, IGNORE_INDEX)
    pos = _pad([list(range(len(EXAMPLES[0]))) + list(range(len(EXAMPLES[1]))),
                list(range(len(EXAMPLES[2]))) + list(range(len(EXAMPLES[3])))], 0)
    labels = packed.clone()
    labels[0, len(EXAMPLES[0])] = labels[1, len(EXAMPLES[2])] = IGNORE_INDEX  # no prediction across examples
    # padding after a row's last sequence is its own "sequence" with no target: give it position 0.. too
    loss_b, g_b = run(packed, labels, pos)
    torch.testing.assert_close(loss_b, loss_a)
    torch.testing.assert_close(g_b, g_a)


def _ol_reference(logits, labels, alpha):
    """OL at batch 1 per device: each micro-batch (one example) CE token mean + alpha x its DEL
    digit mean, averaged over the GA x W micro-batches."""
    n = labels.shape[0]
    fn = build_loss("del", VOCAB, alpha=alpha)
    parts = []
    for i in range(n):
        ce = F.cross_entropy(logits[i, :-1], labels[i, 1:], ignore_index=IGNORE_INDEX)  # the example's token mean
        aux = fn(logits[i : i + 1], labels[i : i + 1]).loss - ce  # alpha x the example's digit mean
        parts.append((ce + aux) / n)
    return torch.stack(parts).sum()


def _oq_reference(logits, labels, alpha_raw):
    """OQ at batch 1 per device: CE over the step's tokens (num_items_in_batch) + alpha_raw x each
    example's digit mean, summed over the GA x W micro-batches."""
    n_tok = int((labels[:, 1:] != IGNORE_INDEX).sum())
    fn = build_loss("del", VOCAB, alpha=alpha_raw, aux_normalization="microbatch_sum")
    parts = [fn(logits[i : i + 1], labels[i : i + 1], step=StepCounts(num_items_in_batch=n_tok)).loss for i in range(labels.shape[0])]
    return torch.stack(parts).sum()


@pytest.mark.parametrize("harness", ["oq", "ol"])
@pytest.mark.parametrize("split", [1, 2, 4])
def test_every_split_of_the_step_gives_the_official_batch_1_gradient(harness, split):
    """1 x 4, 2 x 2, 4 x 1 micro-batches of the same 4 examples: the same gradient, equal to the
    official harness at batch 1 per device (GA x W = 4) scaled to the effective weight."""
    labels = _pad(EXAMPLES, IGNORE_INDEX)
    base = _logits(2, labels.shape).detach()
    eff = 1.28 if harness == "oq" else 0.1
    ref_logits = base.clone().requires_grad_()
    if harness == "oq":
        _oq_reference(ref_logits, labels, eff / 4).backward()  # GA x W = 4 examples: alpha_raw x 4 = eff
    else:
        _ol_reference(ref_logits, labels, eff).backward()
    fn = build_loss("del", VOCAB, alpha=eff, aux_normalization="example_mean",
                    ce_normalization="token" if harness == "oq" else "example_mean")
    logits = base.clone().requires_grad_()
    size = 4 // split
    micro = [labels[i : i + size] for i in range(0, 4, size)]
    counts = step_counts(micro, fn)
    assert (counts.num_examples_in_step, counts.num_digit_examples_in_step) == (4, 4)
    for i, lab in zip(range(0, 4, size), micro):
        fn(logits[i : i + size], lab, step=counts).loss.backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad, rtol=1e-5, atol=1e-7)


def test_examples_without_digits_do_not_dilute_the_numeric_term():
    """The mean runs over the examples that have digit targets: an example with none changes CE only."""
    labels = _pad(EXAMPLES + [[11, 12, 13, 14, 15]], IGNORE_INDEX)
    logits = _logits(3, labels.shape)
    fn = build_loss("del", VOCAB, alpha=1.0, aux_normalization="example_mean")
    with_extra = fn(logits, labels).aux
    without = fn(logits[:4, : labels.shape[1]], labels[:4]).aux
    torch.testing.assert_close(with_extra, without)


def test_unknown_normalisations_and_losses_that_cannot_take_them():
    with pytest.raises(ValueError, match="ce_normalization='example'"):
        build_loss("del", VOCAB, alpha=1.0, ce_normalization="example")
    with pytest.raises(ValueError, match="mixce.*ce_normalization='example_mean'"):
        build_loss("mixce", VOCAB, ce_normalization="example_mean")
    assert build_loss("mixce", VOCAB, ce_normalization="token") is not None
    assert build_loss("del", VOCAB, alpha=1.0, ce_normalization=None).ce_normalization == "token"  # config null
