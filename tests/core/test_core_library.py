"""The core install: ``pip install numlearn`` brings torch and nothing of the reproduction stack, and
the losses work with it alone (``make test-core`` runs this file in a bare venv built from the wheel;
the default tier runs it too, where the reproduction-free assertions are skipped).
The digit ids are given as a DigitVocab, so no tokenizer package is imported."""

from __future__ import annotations

import importlib.util
import math
import os

import pytest
import torch

from numlearn.losses import DigitVocab, LinearHead, backward_scale, build_loss, step_counts

CORE_VENV = os.environ.get("NUMLEARN_CORE_VENV") == "1"  # make test-core, before the [trl] extra
REPRODUCTION = ("hydra", "omegaconf", "wandb", "pandas", "datasets", "transformers", "tokenizers", "accelerate",
                "trl", "matplotlib")  # (sympy comes with torch)
VOCAB = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)  # ids 0..9 are "0".."9", 10 is "."


@pytest.mark.skipif(not CORE_VENV, reason="only in the bare core venv (make test-core)")
def test_core_install_has_no_reproduction_stack():
    import numlearn

    assert "site-packages" in numlearn.__file__  # the wheel, not the source tree
    present = [m for m in REPRODUCTION if importlib.util.find_spec(m) is not None]
    assert not present, f"the core install pulled in {present}"


def test_importing_the_losses_imports_only_torch():
    import subprocess
    import sys

    code = ("import sys, numlearn.losses; bad = [m for m in " + repr(REPRODUCTION) +
            " if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_paper_benchmarks_are_known_by_name_without_a_clone_or_the_reproduction_stack():
    """``extract_answer("gsm8k", ...)`` with nothing registered: the seven specs ship as package data (in the core
    venv, from the installed wheel), and scoring a completion imports none of the reproduction stack."""
    import subprocess
    import sys

    code = ("import sys\nfrom numlearn.evaluation import extract_answer, is_correct\n"
            "got = [extract_answer('gsm8k', 'so #### 1,234'), extract_answer('mmlu_mathematics', 'The answer is (D)'),"
            " str(is_correct('svamp', '12.0', '12'))]\n"
            "bad = [m for m in " + repr(REPRODUCTION) + " if m in sys.modules]\n"
            "print(' '.join(got), bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.path.expanduser("~"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1234 D True []"


def test_del_on_hand_built_logits():
    """One digit target (the 3 in "3."), logits 0 everywhere but the target's: CE is the softmax
    CE over the 12-token vocabulary, and DEL's code-form term (place weights off) is alpha x the mean
    over the ten digit classes of p[k] BCE(sigmoid(z_k), [k == 3]), by hand below."""
    V, z3 = 12, 2.0
    logits = torch.zeros(1, 3, V)
    logits[0, 0, 3] = z3  # position 0 predicts the label at 1 ("3")
    labels = torch.tensor([[11, 3, -100]])  # position 0's target: 3; position 1's: padding
    out = build_loss("del", VOCAB, alpha=1.0, place_weights="none")(logits, labels)
    ce = -(z3 - math.log(math.exp(z3) + V - 1))
    p = [math.exp(z3) / (math.exp(z3) + 9) if k == 3 else 1 / (math.exp(z3) + 9) for k in range(10)]
    sig = lambda x: 1 / (1 + math.exp(-x))
    bce = [-math.log(sig(z3)) if k == 3 else -math.log(1 - sig(0.0)) for k in range(10)]
    aux = sum(pk * bk for pk, bk in zip(p, bce)) / 10
    assert out.ce.item() == pytest.approx(ce, rel=1e-6)
    assert out.aux.item() == pytest.approx(aux, rel=1e-6)
    assert out.loss.item() == pytest.approx(ce + aux, rel=1e-6)


def test_plain_loop_accumulation_matches_one_batch():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 12)
    x = torch.randn(4, 5, 8)
    labels = torch.randint(0, 12, (4, 5))
    labels[1, 3:] = -100
    loss_fn = build_loss("del", VOCAB, alpha=1.28)
    loss_fn(head(x), labels).loss.backward()
    ref = head.weight.grad.clone()
    head.weight.grad = None
    micro = [labels[:1], labels[1:]]  # uneven micro-batches: 1 and 3 rows
    counts = step_counts(micro, loss_fn)
    for lab, xs in zip(micro, (x[:1], x[1:])):
        (loss_fn(head(xs), lab, step=counts).loss * backward_scale()).backward()
    torch.testing.assert_close(head.weight.grad, ref, rtol=1e-5, atol=1e-7)


def test_fused_path_without_transformers():
    torch.manual_seed(0)
    h = torch.randn(2, 6, 8, requires_grad=True)
    W = torch.randn(12, 8, requires_grad=True)
    labels = torch.randint(0, 12, (2, 6))
    fn = build_loss("del", VOCAB, alpha=1.28)
    full = fn(h @ W.T, labels).loss
    fused = fn.from_hidden(h, LinearHead(W, chunk_size=4), labels).loss
    assert fused.item() == pytest.approx(full.item(), rel=1e-6)
