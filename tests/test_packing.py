"""Packed batches (``train.packing``): the same examples and targets as padded batches in fewer
rows, so the same loss, gradient and trained parameters up to float rounding."""

from __future__ import annotations

import pytest
import torch

from numlearn.data.collate import PackCollator, PadCollator
from numlearn.losses import IGNORE_INDEX
from test_training import _cfg


def _ex(n, start=1, prompt=2):
    ids = list(range(start, start + n))
    return {"input_ids": ids, "labels": [IGNORE_INDEX] * prompt + ids[prompt:]}


def test_rows_are_first_fit_longest_first_within_twice_the_longest():
    # lengths 5, 3, 2, 4 (capacity 10): 5 -> row 0; 4 -> row 0 (9); 3 -> row 1; 2 -> row 1 (5)
    c = PackCollator(pad_id=0)
    assert c.rows([5, 3, 2, 4]) == [[0, 3], [1, 2]]
    assert PackCollator(0, capacity_factor=1).rows([5, 3, 2, 4]) == [[0], [3], [1, 2]]
    b = c([_ex(5, 1), _ex(3, 10), _ex(2, 20, prompt=1), _ex(4, 30)])
    assert b["input_ids"].tolist() == [[1, 2, 3, 4, 5, 30, 31, 32, 33], [10, 11, 12, 20, 21, 0, 0, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3], [0, 1, 2, 0, 1, 0, 1, 2, 3]]
    I = IGNORE_INDEX  # noqa: E741
    assert b["labels"].tolist() == [[I, I, 3, 4, 5, I, I, 32, 33], [I, I, 12, I, 21, I, I, I, I]]
    assert b["use_cache"] is False and "attention_mask" not in b
    with pytest.raises(ValueError, match="capacity_factor"):
        PackCollator(0, capacity_factor=0)


def test_an_example_whose_first_token_is_a_target_loses_only_the_cross_example_target():
    """After the shift, label[0] of a padded row is never a target; in a packed row it would be the
    previous example's last token predicting this one's first -- so it is masked."""
    b = PackCollator(0)([_ex(3, 1, prompt=0), _ex(3, 5, prompt=0)])
    assert b["labels"].tolist() == [[IGNORE_INDEX, 2, 3, IGNORE_INDEX, 6, 7]]


def _tiny_model(vocab=64, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    return Qwen2ForCausalLM(cfg)


def _batch(seed=1, n=7):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        L = int(torch.randint(4, 20, (1,), generator=g))
        ids = torch.randint(1, 64, (L,), generator=g).tolist()
        p = int(torch.randint(1, L - 1, (1,), generator=g))
        out.append({"input_ids": ids, "labels": [IGNORE_INDEX] * p + ids[p:]})
    return out


def test_packed_logits_are_each_examples_own():
    """Every example's logits in the packed rows equal its logits alone (padded batch). Without
    ``use_cache=False`` transformers skips the packed-sequence mask and the examples attend to each
    other -- the trap this collator sends the flag for."""
    model = _tiny_model().eval()
    batch = _batch()
    pad = PadCollator(0, with_attention_mask=False)(batch)
    coll = PackCollator(0)
    packed = coll(batch)
    assert packed["input_ids"].shape[0] < len(batch)
    with torch.no_grad():
        ref = model(input_ids=pad["input_ids"]).logits
        got = model(input_ids=packed["input_ids"], position_ids=packed["position_ids"], use_cache=False).logits
        leaky = model(input_ids=packed["input_ids"], position_ids=packed["position_ids"]).logits
    lengths = [len(b["input_ids"]) for b in batch]
    worst_leak = 0.0
    for r, members in enumerate(coll.rows(lengths)):
        o = 0
        for i in members:
            L = lengths[i]
            torch.testing.assert_close(got[r, o:o + L], ref[i, :L], rtol=1e-5, atol=1e-5)
            worst_leak = max(worst_leak, float((leaky[r, o:o + L] - ref[i, :L]).abs().max()))
            o += L
    assert worst_leak > 1e-2  # with the cache the later examples see the earlier ones


@pytest.mark.parametrize("loss", ["mle", "del", "ntl"])
def test_packed_batch_has_the_padded_batchs_loss_and_gradient(loss, char_tokenizer):
    from numlearn.losses import build_loss

    kw = {} if loss == "mle" else {"alpha": 0.7}
    fn = build_loss(loss, char_tokenizer, **kw)
    # digit-heavy examples so the numeric terms have targets (char ids 0-9 are the digits)
    g = torch.Generator().manual_seed(3)
    batch = []
    for _ in range(6):
        L = int(torch.randint(6, 16, (1,), generator=g))
        ids = torch.randint(0, 14, (L,), generator=g).tolist()
        batch.append({"input_ids": ids, "labels": [IGNORE_INDEX] * 2 + ids[2:]})
    vocab = len(char_tokenizer)
    grads = {}
    for name, coll in (("pad", PadCollator(0, with_attention_mask=False)), ("pack", PackCollator(0))):
        model = _tiny_model(vocab=vocab)
        b = coll(batch)
        kwargs = {"position_ids": b["position_ids"], "use_cache": False} if name == "pack" else {}
        out = fn(model(input_ids=b["input_ids"], **kwargs).logits, b["labels"])
        out.loss.backward()
        grads[name] = (float(out.loss.detach()), [p.grad.clone() for p in model.parameters()])
    assert grads["pack"][0] == pytest.approx(grads["pad"][0], rel=1e-5)
    for a, b in zip(grads["pad"][1], grads["pack"][1]):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_packed_training_ends_at_the_padded_runs_parameters(tmp_path):
    """Through the real Trainer: train.packing=true trains to the parameters of the padded run."""
    from transformers import AutoModelForCausalLM

    from numlearn.training.run import train

    runs = {p: train(_cfg(tmp_path, "loss=del", "loss.alpha=0.8", f"train.packing={p}", "train.attention_mask=false",
                          f"run_dir={tmp_path}/packing_{p}")) for p in (False, True)}
    a, b = (AutoModelForCausalLM.from_pretrained(runs[p] / "final") for p in (False, True))
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pb, pa, rtol=1e-4, atol=1e-5, msg=name)


def test_packing_refuses_an_attention_mask(tmp_path):
    from numlearn.training.run import check_run_options

    with pytest.raises(ValueError, match="train.packing needs train.attention_mask=false"):
        check_run_options(_cfg(tmp_path, "train.packing=true", "train.attention_mask=true"))
    with pytest.raises(ValueError, match="train.packing='rows'"):
        check_run_options(_cfg(tmp_path, "train.packing=rows", "train.attention_mask=false"))
