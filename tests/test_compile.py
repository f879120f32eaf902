"""Issue 45 item 3: a sync-free loss. Every loss of the registry, on logits and (where it has one) on hidden states,
with the step's counts as tensors, as Python numbers or absent, traces as one graph with no break
(``torch._dynamo.explain``), and ``torch.compile(fullgraph=True)`` gives eager's value and gradients.

What makes it so: the digit targets in the dense form (``DigitTargets.mask``: every position, no ``nonzero``),
the CE backward's target -1 as a scatter over every row, the normalisers as tensors (``_count_tensor``), the
digit ids cached per device, and under compilation the chunked CE / MixCE / EMO over every row with weight 0 where
a row is ignored (``trained_rows``: eager keeps the trained rows only, one sync, no compute on prompt rows). The
example-mean normalisations (``ce_normalization`` / ``aux_normalization="example_mean"``, packed rows too) count
their examples with a scatter into a table sized from the batch's shape (``per_example_weights``). Not covered:
number-token vocabularies (a number token's digits have no fixed place in the batch)."""

from __future__ import annotations

import pytest
import torch

from numlearn.losses import LOSSES, DigitVocab, LinearHead, StepCounts, build_loss, capabilities

V, H = 40, 8
VOCAB = DigitVocab(tuple(range(10)), 10)


class _Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Linear(H, V, bias=False)

    def get_output_embeddings(self):
        return self.e


def _loss(name):
    caps = capabilities(name)
    fn = build_loss(name, VOCAB, **({"alpha": 0.7} if caps.numeric_term else {}))
    if caps.needs_model_embeddings:
        torch.manual_seed(1)
        fn.bind_model(_Head())
    return fn


def _batch():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, V, (2, 12), generator=g)
    labels[:, :3] = -100  # a prompt
    labels[1, -2:] = -100  # padding
    labels[1, 4:9] = torch.tensor([3, 10, 5, 7, 2])  # "3.572"
    return (torch.randn(2, 12, V, generator=g), torch.randn(2, 12, H, generator=g),
            torch.randn(V, H, generator=g) * 0.3, labels)


STEPS = {"absent": None,
         "tensors": StepCounts(num_items_in_batch=torch.tensor(30), num_digits_in_batch=torch.tensor(9),
                               num_microbatches_in_step=torch.tensor(2)),
         "numbers": StepCounts(num_items_in_batch=30, num_digits_in_batch=9, num_microbatches_in_step=2)}
CASES = [(name, path) for name in sorted(LOSSES) for path in ("logits", "hidden")
         if path == "logits" or capabilities(name).linear_form]


def _fn(fn, path, step, W):
    def f(x, labels):
        out = fn(x, labels, step=step) if path == "logits" else fn.from_hidden(x, LinearHead(W, chunk_size=5), labels, step=step)
        return out.loss, out.stats.get("digit_acc", out.ce)
    return f


@pytest.mark.parametrize("name,path", CASES)
def test_every_loss_traces_as_one_graph_without_a_break(name, path):
    logits, hidden, W, labels = _batch()
    fn = _loss(name)
    for key, step in STEPS.items():
        torch._dynamo.reset()
        ex = torch._dynamo.explain(_fn(fn, path, step, W))(logits if path == "logits" else hidden, labels)
        reasons = [f"{str(b.reason).splitlines()[0][:80]} at {b.user_stack[-1].filename.rsplit('/', 1)[-1]}:"
                   f"{b.user_stack[-1].lineno}" for b in ex.break_reasons if b.user_stack]
        assert (ex.graph_count, ex.graph_break_count) == (1, 0), (key, reasons)


@pytest.mark.parametrize("name,path", CASES)
def test_fullgraph_compile_matches_eager(name, path):
    """Value, statistics and gradient (w.r.t. the logits, or the hidden states and the head) of the compiled loss
    equal eager's within 1e-6 (fp32; AOT autograd without code generation)."""
    logits, hidden, W, labels = _batch()
    fn = _loss(name)
    step = STEPS["tensors"]
    outs = []
    for compiled in (False, True):
        torch._dynamo.reset()
        x = (logits if path == "logits" else hidden).clone().requires_grad_()
        w = W.clone().requires_grad_()
        f = _fn(fn, path, step, w)
        loss, stat = (torch.compile(f, fullgraph=True, backend="aot_eager") if compiled else f)(x, labels)
        loss.backward()
        outs.append((loss.detach(), stat.detach(), x.grad, w.grad))
    (l0, s0, gx0, gw0), (l1, s1, gx1, gw1) = outs
    torch.testing.assert_close(l1, l0, rtol=0, atol=1e-6)
    torch.testing.assert_close(s1, s0, rtol=0, atol=1e-6)
    torch.testing.assert_close(gx1, gx0, rtol=0, atol=1e-6)
    if path == "hidden":
        torch.testing.assert_close(gw1, gw0, rtol=0, atol=1e-6)
    assert float(gx0.abs().sum()) > 0


def test_inductor_compiles_the_fused_del_and_matches_eager():
    """The real compiler (Inductor, C++ on CPU) on DEL's hidden-state path: one compiled graph, within 1e-6 of
    eager in fp32 (measured 2.4e-7 on the logits path)."""
    import shutil

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("Inductor needs a C++ compiler on CPU (apt-get install g++)")
    logits, hidden, W, labels = _batch()
    fn = _loss("del")
    outs = []
    for compiled in (False, True):
        torch._dynamo.reset()
        h, w = hidden.clone().requires_grad_(), W.clone().requires_grad_()
        f = _fn(fn, "hidden", STEPS["tensors"], w)
        loss, _ = (torch.compile(f, fullgraph=True) if compiled else f)(h, labels)
        loss.backward()
        outs.append((loss.detach(), h.grad, w.grad))
    for a, b in zip(*outs):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)


def test_the_dense_form_and_the_compact_one_are_the_same_digits():
    """The losses' dense digit targets (every position, a mask) hold the compact ones' rows, values and place
    weights at the digit positions and zeros elsewhere; the statistics and the loss do not see the difference."""
    from numlearn.losses.spans import number_spans, to_targets

    _, _, _, labels = _batch()
    t = to_targets(labels)
    c, d = number_spans(t, VOCAB), number_spans(t, VOCAB, dense=True)
    assert d.rows.numel() == t.numel() and int(d.mask.sum()) == c.count == d.count
    for field in ("values", "del_weight", "int_place"):
        torch.testing.assert_close(getattr(d, field)[d.mask], getattr(c, field))
        assert not getattr(d, field)[~d.mask].any()
    assert torch.equal(d.rows[d.mask], c.rows)


# -- host reads in eager: what a GPU step waits for -------------------------------------------------------------
def _host_reads(fn):
    """The ops of ``fn()`` that read a tensor back to the host or give a data-dependent shape, each with the
    numlearn function it came from."""
    import traceback

    from torch.utils._python_dispatch import TorchDispatchMode

    class Reads(TorchDispatchMode):
        ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in ("_local_scalar_dense", "nonzero", "unique", "_unique2", "unique_consecutive", "bincount"):
                frames = [f for f in traceback.extract_stack()[:-1] if "/numlearn/" in f.filename]
                self.ops.append((name, frames[-1].name if frames else "?"))
            return func(*args, **(kwargs or {}))

    with Reads() as r:
        fn()
    return r.ops


def test_eager_reads_back_only_the_label_check_and_the_trained_rows():
    """Issue 45 item 3 in eager: step_counts reads nothing back per micro-batch but the label check (on CPU; on an
    accelerator that check runs on the device, torch._assert_async), the loss on logits nothing else, the loss on
    hidden states one nonzero (the trained rows, so that no compute goes to prompt rows), and LossBridge's logged
    parts stay on the device until pop_means. Before: 7 reads per micro-batch in step_counts, F.one_hot's range
    check twice per DEL call, five float() per micro-batch in LossBridge."""
    from types import SimpleNamespace

    from numlearn.integrations.hf import LossBridge
    from numlearn.losses import step_counts

    logits, hidden, W, labels = _batch()
    fn = _loss("del")
    micro = [labels, labels.flip(0), labels, labels.flip(1)]
    counts = {}
    reads = _host_reads(lambda: counts.setdefault("step", step_counts(micro, fn)))
    assert reads == [("_local_scalar_dense", "to_targets")] * len(micro)
    step = counts["step"]
    from numlearn.losses.spans import count_digit_targets, count_examples, count_targets

    assert step.num_items_in_batch == sum(count_targets(m) for m in micro) and step.num_microbatches_in_step == 4
    assert step.num_digits_in_batch == sum(count_digit_targets(m, VOCAB) for m in micro)
    assert (step.num_examples_in_step, step.num_digit_examples_in_step) == \
        tuple(sum(c) for c in zip(*(count_examples(m, VOCAB) for m in micro)))
    x = logits.clone().requires_grad_()
    assert _host_reads(lambda: fn(x, labels, step=step).loss.backward()) == [("_local_scalar_dense", "to_targets")]
    h = hidden.clone().requires_grad_()
    assert _host_reads(lambda: fn.from_hidden(h, W, labels, step=step).loss.backward()) == \
        [("_local_scalar_dense", "to_targets"), ("nonzero", "trained_rows")]
    bridge = LossBridge(fn)  # as NumlearnTrainerMixin drives it: the step's counts, then its micro-batches
    bridge.managed = bridge.in_training_step = True
    bridge.microbatches_in_step = step.num_microbatches_in_step
    bridge.start_step(step.num_digits_in_batch, step.num_items_in_batch,
                      (step.num_examples_in_step, step.num_digit_examples_in_step))
    out = SimpleNamespace(logits=logits)
    reads = _host_reads(lambda: [bridge.compute(out, m) for m in micro])
    assert [r for r in reads if r[1] != "to_targets"] == [], reads
    assert set(bridge.pop_means()) >= {"loss/ce", "loss/aux", "train/digit_acc"}


EXAMPLE_MEAN = [(name, path) for name in ("mle", "del") for path in ("logits", "hidden")]


@pytest.mark.parametrize("name,path", EXAMPLE_MEAN)
def test_example_mean_normalisations_trace_as_one_graph_and_match_eager(name, path):
    """The per-example means (the paper presets' CE and numeric-term normalisations) on plain and packed rows
    (position_ids restarting inside a row): one graph, no break, and the compiled value and gradients equal
    eager's. Before, ``torch.unique`` / ``bincount`` / ``nonzero`` counted the examples on the host."""
    logits, hidden, W, labels = _batch()
    opts = {"ce_normalization": "example_mean"} | ({"alpha": 0.7, "aux_normalization": "example_mean"}
                                                   if name == "del" else {})
    fn = build_loss(name, VOCAB, **opts)
    packed = torch.tensor([list(range(6)) + list(range(6)), list(range(12))])  # row 0 holds two sequences
    for pos in (None, packed):
        def f(x, labels, w, pos=pos):
            kw = {"position_ids": pos}
            out = fn(x, labels, **kw) if path == "logits" else fn.from_hidden(x, LinearHead(w, chunk_size=5), labels, **kw)
            return out.loss
        x0 = logits if path == "logits" else hidden
        torch._dynamo.reset()
        ex = torch._dynamo.explain(f)(x0, labels, W)
        assert (ex.graph_count, ex.graph_break_count) == (1, 0), [str(b.reason)[:120] for b in ex.break_reasons]
        outs = []
        for compiled in (False, True):
            torch._dynamo.reset()
            x, w = x0.clone().requires_grad_(), W.clone().requires_grad_()
            loss = (torch.compile(f, fullgraph=True, backend="aot_eager") if compiled else f)(x, labels, w)
            loss.backward()
            outs.append((loss.detach(), x.grad, w.grad))
        (l0, gx0, gw0), (l1, gx1, gw1) = outs
        torch.testing.assert_close(l1, l0, rtol=0, atol=1e-6)
        torch.testing.assert_close(gx1, gx0, rtol=0, atol=1e-6)
        if path == "hidden":
            torch.testing.assert_close(gw1, gw0, rtol=0, atol=1e-6)


def test_per_example_weights_by_hand():
    """Keys 7, 7, 2, 9, 7 with the fourth left out: example 7 has three counted positions (1/3 each), example 2
    one, example 9 none counted (weight 0, not an example)."""
    from numlearn.losses.spans import per_example_weights

    w, n = per_example_weights(torch.tensor([7, 7, 2, 9, 7]), torch.tensor([True, True, True, False, True]), 10)
    torch.testing.assert_close(w, torch.tensor([1 / 3, 1 / 3, 1.0, 0.0, 1 / 3]))
    assert int(n) == 2
