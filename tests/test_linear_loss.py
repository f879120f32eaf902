"""The linear form of the losses (``from_hidden``): the same value and gradients as the logits path,
without materialising the logits."""

from __future__ import annotations

import pytest
import torch

from numlearn.losses import (
    IGNORE_INDEX,
    DELLoss,
    DigitVocab,
    Dist2Loss,
    LinearHead,
    MixCELoss,
    MLELoss,
    NTLLoss,
    StepCounts,
    build_loss,
    capabilities,
)
from numlearn.losses import LOSSES as REGISTRY
from numlearn.losses.linear import chunked_linear_cross_entropy

VOCAB = DigitVocab(tuple(range(10)), 10)  # digit k has id k, "." is 10
V, H = 37, 16

def _registry_variants() -> dict:
    """Every loss of the registry that declares a linear form, built with its defaults (a weight where it has
    one): a new loss is covered here without an edit (issue 43)."""
    from numlearn.losses import LOSSES as REGISTRY
    from numlearn.losses import build_loss, capabilities

    out = {}
    for name in sorted(REGISTRY):
        caps = capabilities(name)
        if caps.linear_form:
            out[f"registry:{name}"] = (lambda n=name, c=caps: build_loss(n, VOCAB, **({"alpha": 0.7}
                                                                                   if c.numeric_term else {})))
    return out


LOSSES = {
    **_registry_variants(),
    "mle": lambda: MLELoss(VOCAB),
    "mle-no-digits": lambda: MLELoss(None),
    "ntl": lambda: NTLLoss(VOCAB, alpha=0.7),
    "ntl-mse": lambda: NTLLoss(VOCAB, alpha=0.7, variant="mse"),
    "dist2": lambda: Dist2Loss(VOCAB, alpha=0.9),
    "del": lambda: DELLoss(VOCAB, alpha=1.28),
    "del-paper": lambda: DELLoss(VOCAB, alpha=1.28, form="paper"),
    "del-int-only": lambda: DELLoss(VOCAB, alpha=0.5, float_spans=False, place_weights="none"),
    "del-microbatch-sum": lambda: DELLoss(VOCAB, alpha=0.01, aux_normalization="microbatch_sum"),
    "del-microbatch-mean": lambda: DELLoss(VOCAB, alpha=0.1, aux_normalization="microbatch_mean"),
    "mixce-paper": lambda: MixCELoss(VOCAB, eta=0.3),
    "mixce-official": lambda: MixCELoss(VOCAB, eta=0.3, form="official"),
    "mixce-no-digits": lambda: MixCELoss(None, eta=0.5),
}


def _batch(seed=0, B=3, T=23, dtype=torch.float32, bias=False, digits=True):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g).to(dtype).requires_grad_()
    weight = (torch.randn(V, H, generator=g) * 0.3).to(dtype).requires_grad_()
    b = (torch.randn(V, generator=g) * 0.1).to(dtype).requires_grad_() if bias else None
    lo = 0 if digits else 11  # without digits: only non-digit tokens as targets
    labels = torch.randint(lo, V, (B, T), generator=g)
    labels[:, :5] = IGNORE_INDEX  # the prompt
    labels[1, -4:] = IGNORE_INDEX  # padding
    labels[2, 7:10] = torch.tensor([3, 10, 5]) if digits else labels[2, 7:10]  # "3.5"
    return hidden, weight, b, labels


def _both(fn, hidden, weight, b, labels, chunk, **kw):
    """(value, grads) of the logits path and of the linear path."""
    out = {}
    for path in ("logits", "linear"):
        h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
        bb = b.detach().clone().requires_grad_() if b is not None else None
        if path == "logits":
            logits = h @ w.t() + (bb if bb is not None else 0)
            r = fn(logits, labels, **kw)
        else:
            r = fn.from_hidden(h, LinearHead(w, bb, chunk_size=chunk), labels, **kw)
        r.loss.backward()
        out[path] = (r, h.grad, w.grad, bb.grad if bb is not None else None)
    return out["logits"], out["linear"]


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("chunk", [1, 7, 4096])  # 7 does not divide the 53 target rows
def test_value_and_gradients_equal_the_logits_path(name, chunk):
    fn = LOSSES[name]()
    hidden, weight, b, labels = _batch(bias=(chunk == 7))
    kw = {"step": StepCounts(num_items_in_batch=61, num_digits_in_batch=40, num_microbatches_in_step=4)}
    (ra, gha, gwa, gba), (rb, ghb, gwb, gbb) = _both(fn, hidden, weight, b, labels, chunk, **kw)
    for x, y in ((ra.loss, rb.loss), (ra.ce, rb.ce), (ra.aux, rb.aux), (gha, ghb), (gwa, gwb)):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)
    if gba is not None:
        torch.testing.assert_close(gbb, gba, rtol=1e-5, atol=1e-6)
    for k in ra.stats:
        torch.testing.assert_close(rb.stats[k], ra.stats[k])
    if name not in ("mle", "mle-no-digits", "registry:mle") and not name.startswith(("mixce", "registry:mixce")):
        assert float(ra.aux) > 0  # the numeric term is really in the comparison
    if name.startswith("mixce"):
        assert abs(float(ra.aux)) > 1e-3  # MixCE really differs from CE here


def test_bf16_hidden_states():
    fn = DELLoss(VOCAB, alpha=1.28)
    hidden, weight, _, labels = _batch(dtype=torch.bfloat16)
    (ra, gha, gwa, _), (rb, ghb, gwb, _) = _both(fn, hidden, weight, None, labels, 5)
    assert ghb.dtype == torch.bfloat16 and gwb.dtype == torch.bfloat16
    torch.testing.assert_close(rb.loss, ra.loss, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ghb.float(), gha.float(), rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(gwb.float(), gwa.float(), rtol=2e-2, atol=2e-3)


def test_no_digit_targets_and_no_targets_at_all():
    fn = DELLoss(VOCAB, alpha=1.0)
    hidden, weight, _, labels = _batch(digits=False)
    (ra, gha, gwa, _), (rb, ghb, gwb, _) = _both(fn, hidden, weight, None, labels, 6)
    assert float(rb.aux) == 0.0 and float(ra.aux) == 0.0
    torch.testing.assert_close(rb.loss, ra.loss)
    torch.testing.assert_close(ghb, gha)
    empty = torch.full_like(labels, IGNORE_INDEX)
    r = fn.from_hidden(hidden, weight, empty)
    r.loss.backward()
    assert float(r.loss.detach()) == 0.0 and hidden.grad is not None and float(hidden.grad.abs().sum()) == 0.0


def test_chunked_ce_by_hand():
    """Two rows, V = 3: h = I, W = [[0,0],[ln 2,0],[0,0]]... logits row 0 = [0, ln2, 0] (target 1):
    CE = ln(4) - ln(2) = ln 2; row 1 = [0, 0, 0] (target 2): CE = ln 3."""
    import math

    h = torch.eye(2, requires_grad=True)
    w = torch.tensor([[0.0, 0.0], [math.log(2), 0.0], [0.0, 0.0]], requires_grad=True)
    ce = chunked_linear_cross_entropy(h, w, None, torch.tensor([1, 2]), chunk_size=1)
    assert float(ce.detach()) == pytest.approx(math.log(2) + math.log(3))
    ce.backward()
    # d/dz of row 0: softmax [1/4, 1/2, 1/4] - onehot(1) = [1/4, -1/2, 1/4]; grad h0 = that @ W = [-ln2/2, 0]
    assert h.grad[0].tolist() == pytest.approx([-math.log(2) / 2, 0.0])


def test_bad_shapes_and_chunk():
    fn = MLELoss(VOCAB)
    hidden, weight, _, labels = _batch()
    with pytest.raises(ValueError, match="hidden \\[B, T, H\\]"):
        fn.from_hidden(hidden[0], weight, labels)
    with pytest.raises(ValueError, match="chunk_size"):
        fn.from_hidden(hidden, LinearHead(weight, chunk_size=0), labels)


@pytest.mark.parametrize("accumulation", ["float32", "weight"])
def test_bf16_head_in_vocabulary_blocks_is_within_bf16_rounding_of_fp32(accumulation):
    """Issue 45 item 2: a bf16 head forms its products a vocabulary block at a time (V = 300 here: five blocks of
    64 with chunk 5), never a [V, H] product or a whole-chunk bf16 copy, and grad W is summed over the chunks in
    fp32 (default) or in bf16 (``grad_accumulation="weight"``, no fp32 [V, H] buffer). Value and gradients stay
    within bf16 rounding of the fp32 path on the same (bf16-representable) inputs."""
    from numlearn.losses.linear import _vocab_blocks

    Vb, Hb = 300, 16
    assert len(_vocab_blocks(5, Vb, Hb, 2)) == 5
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 23, Hb, generator=g).bfloat16()
    weight = (torch.randn(Vb, Hb, generator=g) * 0.3).bfloat16()
    labels = torch.randint(0, Vb, (3, 23), generator=g)
    labels[:, :5] = IGNORE_INDEX
    labels[2, 7:10] = torch.tensor([3, 10, 5])
    fn = DELLoss(VOCAB, alpha=1.28)
    res = {}
    for dt in (torch.float32, torch.bfloat16):
        h, w = hidden.to(dt).requires_grad_(), weight.to(dt).requires_grad_()
        r = fn.from_hidden(h, LinearHead(w, chunk_size=5, grad_accumulation=accumulation), labels)
        r.loss.backward()
        res[dt] = (r, h.grad, w.grad)
    (r32, gh32, gw32), (r16, gh16, gw16) = res[torch.float32], res[torch.bfloat16]
    assert gh16.dtype == gw16.dtype == torch.bfloat16 and float(r16.aux) > 0
    torch.testing.assert_close(r16.loss, r32.loss, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(r16.aux, r32.aux, rtol=2e-2, atol=1e-2)
    scale_h, scale_w = gh32.abs().max(), gw32.abs().max()
    assert (gh16.float() - gh32).abs().max() <= 2e-2 * scale_h
    assert (gw16.float() - gw32).abs().max() <= 2e-2 * scale_w
    with pytest.raises(ValueError, match="grad_accumulation must be 'float32' or 'weight'"):
        LinearHead(weight.float(), grad_accumulation="bf16")


def test_peak_memory_is_one_chunk_not_the_logits():
    """The forward and backward never hold an [M, V] block: with V large and a small chunk, the
    autograd graph saves only h, W, targets and one log-sum-exp per row."""
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    fn = DELLoss(VOCAB, alpha=1.0)
    g = torch.Generator().manual_seed(0)
    Vbig, M = 5000, 2 * 40
    hidden = torch.randn(2, 40, H, generator=g, requires_grad=True)
    weight = torch.randn(Vbig, H, generator=g, requires_grad=True)
    labels = torch.randint(0, Vbig, (2, 40), generator=g)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        r = fn.from_hidden(hidden, LinearHead(weight, chunk_size=8), labels)
    r.loss.backward()
    assert max(saved) <= Vbig * H  # the weight itself; never M x V
    assert Vbig * H < M * Vbig


def test_no_grad_forms_no_gradient_and_same_value(monkeypatch):
    from numlearn.losses import linear

    calls = []
    real = linear._add_products
    monkeypatch.setattr(linear, "_add_products", lambda *a: calls.append(1) or real(*a))
    fn = DELLoss(VOCAB, alpha=1.0)
    hidden, weight, _, labels = _batch()
    with torch.no_grad():
        r = fn.from_hidden(hidden, LinearHead(weight, chunk_size=8), labels)
    assert not calls  # evaluation pays for the logits only
    ref = fn(hidden @ weight.t(), labels)
    torch.testing.assert_close(r.loss, ref.loss.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["del", "del-weights-scale", "del-none", "mixce"])
def test_the_fused_chain_equals_the_eager_chain(dtype, case):
    """Issue 45 item 4: each chunk's softmax-minus-one-hot chain compiled into one kernel (fused_chain=True) gives
    the eager chain's loss and gradients (fp32 and a bf16 head; with per-position weights and a logit scale; under
    reduction="none", whose backward recomputes the chunks; MixCE's per-row pass) to fp32 rounding."""
    from numlearn.losses import LogitTransform

    hidden, weight, _, labels = _batch(dtype=dtype)
    kw, fn, transform = {}, DELLoss(VOCAB, alpha=1.28), None
    if case == "del-weights-scale":
        kw = {"loss_weights": torch.rand(labels.shape, generator=torch.Generator().manual_seed(5))}
        transform = LogitTransform(scale=0.25)
    elif case == "del-none":
        from numlearn.losses import build_loss

        fn = build_loss("del", VOCAB, alpha=1.28, reduction="none")
    elif case == "mixce":
        fn = MixCELoss(VOCAB, eta=0.3)
    res = []
    for fused in (False, True):
        h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
        out = fn.from_hidden(h, LinearHead(w, transform=transform, chunk_size=7, fused_chain=fused), labels, **kw)
        out.loss.sum().backward()
        res.append((out.loss.detach().float(), h.grad.float(), w.grad.float()))
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-3}
    for a, b in zip(*res):
        torch.testing.assert_close(b, a, **tol)
    assert float(res[0][1].abs().sum()) > 0


def test_auto_chunk_size_is_sized_from_h_and_v():
    """Issue 45 item 2: chunk_size="auto" takes the power of two at or above rows / ceil(V / H) (Liger-Kernel's
    rule), so the [chunk, V] block holds about as many elements as the hidden states. By hand: Qwen2.5-1.5B at
    6,000 target rows, ceil(151,665 / 1,536) = 99, 6,000 / 99 = 60.6 -> 64; here 53 rows, ceil(37 / 16) = 3,
    ceil(53 / 3) = 18 -> 32. The loss and gradients equal a fixed chunk's."""
    from numlearn.losses.linear import auto_chunk_size
    from numlearn.training.run import loss_chunk_size

    assert auto_chunk_size(6000, 1536, 151_665) == 64
    assert auto_chunk_size(53, H, V) == 32 and auto_chunk_size(1, 8, 10) == 1
    assert auto_chunk_size(96, 10, 25) == 32  # ceil(25 / 10) = 3, 96 / 3 = 32 (a floor would give 48 -> 64)
    fn = DELLoss(VOCAB, alpha=1.28)
    hidden, weight, _, labels = _batch()
    res = []
    for chunk in ("auto", 5):
        h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
        out = fn.from_hidden(h, LinearHead(w, chunk_size=chunk), labels)
        out.loss.backward()
        res.append((out.loss.detach(), h.grad, w.grad))
    for a, b in zip(*res):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert loss_chunk_size("auto") == "auto" and loss_chunk_size(None) == 1024 and loss_chunk_size("256") == 256
    for bad in (0, "big", True):
        with pytest.raises(ValueError, match="loss_chunk_size"):
            loss_chunk_size(bad)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1 or 'auto'"):
        fn.from_hidden(hidden, LinearHead(weight, chunk_size="huge"), labels)


@pytest.mark.parametrize("accumulation", ["weight", "float32"])
def test_a_bf16_head_forms_no_tensor_beyond_one_chunk_block_but_the_gradients(accumulation):
    """Issue 45 item 2, the memory bound by construction: every tensor any op produces during a bf16 head's
    fused DEL (forward and backward), other than the gradients it returns, is at most 1.2x one fp32
    [chunk, V] block -- no [V, H] product, no fp32 copy of one, no whole-chunk bf16 copy. With the default fp32
    accumulator the one exception is that [V, H] fp32 buffer. (The code before the vocabulary blocks formed
    gz.T @ h as a bf16 [V, H] product and its fp32 copy on every chunk.)"""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Produced(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.numel():
                    self.seen.append((t.numel() * t.element_size(), t.untyped_storage().data_ptr(), str(func),
                                      tuple(t.shape), t.dtype))
            return out

    Vb, Hb, chunk = 300, 16, 5
    g = torch.Generator().manual_seed(3)
    h = torch.randn(3, 23, Hb, generator=g).bfloat16().requires_grad_()
    w = (torch.randn(Vb, Hb, generator=g) * 0.3).bfloat16().requires_grad_()
    labels = torch.randint(0, Vb, (3, 23), generator=g)
    labels[2, 7:10] = torch.tensor([3, 10, 5])
    mode = Produced()
    with mode:
        DELLoss(VOCAB, alpha=1.28).from_hidden(h, LinearHead(w, chunk_size=chunk, grad_accumulation=accumulation),
                                               labels).loss.backward()
    returned = {h.grad.untyped_storage().data_ptr(), w.grad.untyped_storage().data_ptr()}
    block = chunk * Vb * 4  # one fp32 [chunk, V] block, bytes
    over = [s for s in mode.seen if s[1] not in returned and s[0] > 1.2 * block]
    if accumulation == "weight":
        assert not over, over
    else:
        assert over and all(s[3] == (Vb, Hb) and s[4] == torch.float32 for s in over), over


@pytest.mark.parametrize("name", [n for n in sorted(REGISTRY) if capabilities(n).linear_form])
def test_from_hidden_has_the_logits_calls_shape_with_the_head_as_one_argument(name):
    """Issue 43, one loss call: ``from_hidden(hidden, head, labels, step, labels_shifted, *, position_ids,
    loss_weights)`` has the logits call's parameters after its first two, for every loss with a linear form (from
    the registry). The head is a ``LinearHead`` (weight, bias, transform, how the kernel runs) or the weight alone;
    the same loss either way."""
    import inspect

    cls = REGISTRY[name]
    call = list(inspect.signature(cls.__call__).parameters)
    fused = list(inspect.signature(cls.from_hidden).parameters)
    assert fused[:3] == ["self", "hidden", "head"] and fused[3:] == call[2:], (fused, call)
    fn = build_loss(name, VOCAB, **({"alpha": 1.28} if capabilities(name).numeric_term else {}))
    hidden, weight, b, labels = _batch(bias=True)
    by_tensor = fn.from_hidden(hidden, weight, labels).loss
    assert torch.equal(by_tensor, fn.from_hidden(hidden, LinearHead(weight), labels).loss)
    with_bias = fn.from_hidden(hidden, LinearHead(weight, b, chunk_size=5), labels).loss
    torch.testing.assert_close(with_bias, fn(hidden @ weight.t() + b, labels).loss, rtol=1e-5, atol=1e-6)


def test_the_old_from_hidden_keywords_are_a_deprecated_alias_of_the_head():
    """The keywords of before 2026-12-07 (lm_head_bias=, chunk_size=, logit_transform=, grad_accumulation=,
    fused_chain=) and the bias in the old fourth place give the LinearHead call's loss, bit for bit, and warn
    once (FutureWarning) naming LinearHead; keywords beside a LinearHead, a head of another type and a head of
    another width are refused, each in one line."""
    import warnings

    from numlearn.losses import LogitTransform, base

    fn = DELLoss(VOCAB, alpha=1.28)
    hidden, weight, b, labels = _batch(bias=True)
    tr = LogitTransform(scale=0.5)
    new = fn.from_hidden(hidden, LinearHead(weight, b, tr, chunk_size=5), labels).loss
    base._WARNED.discard("head keywords")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old = fn.from_hidden(hidden, weight, labels, lm_head_bias=b, chunk_size=5, logit_transform=tr).loss
        positional = fn.from_hidden(hidden, weight, labels, b, chunk_size=5, logit_transform=tr).loss
    dep = [w for w in seen if issubclass(w.category, FutureWarning)]
    assert len(dep) == 1 and "LinearHead(" in str(dep[0].message) and "lm_head_bias" in str(dep[0].message)
    assert torch.equal(old, new) and torch.equal(positional, new)
    with pytest.raises(TypeError, match=r"pass \['chunk_size'\] inside head=LinearHead"):
        fn.from_hidden(hidden, LinearHead(weight), labels, chunk_size=5)
    with pytest.raises(TypeError, match="head must be a LinearHead or the \\[V, H\\] output weight, got Linear"):
        fn.from_hidden(hidden, torch.nn.Linear(weight.shape[1], weight.shape[0]), labels)
    with pytest.raises(ValueError, match="hidden has H = "):
        fn.from_hidden(hidden, weight[:, :-1], labels)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        fn.from_hidden(hidden, weight, labels, chunk=5)
