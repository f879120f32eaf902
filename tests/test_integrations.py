"""The losses inside the loops researchers use (issue 24): each test is one cell of the
compatibility matrix in ``numlearn.integrations`` and failed before its fix."""

from __future__ import annotations

import pytest
import torch

from numlearn.losses import IGNORE_INDEX, LinearHead, backward_scale, build_loss, shift_targets, step_counts
from numlearn.testing import grads as _grads
from numlearn.testing import model as _llama  # a one-layer Llama from a config

TEXTS = ["12+345=357", "a 9.5 b", "7*8=56 ok", "x", "1000-1=999", "3.14 pi", "zz 42", "2024 year"]


def _batch(tok, texts):
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    T = max(map(len, ids))
    input_ids = torch.full((len(ids), T), tok.pad_token_id)
    labels = torch.full((len(ids), T), IGNORE_INDEX)
    mask = torch.zeros((len(ids), T), dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(x)] = torch.tensor(x)
        labels[i, 0] = IGNORE_INDEX
        mask[i, : len(x)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}


# -- item 5: labels already shifted -------------------------------------------------------------
@pytest.mark.parametrize("name", ["mle", "ntl", "dist2", "del", "mixce"])
def test_pre_shifted_labels_give_the_unshifted_loss(char_tokenizer, name):
    b = _batch(char_tokenizer, TEXTS[:4])
    torch.manual_seed(0)
    logits = torch.randn(*b["labels"].shape, len(char_tokenizer))
    fn = build_loss(name, char_tokenizer, **({"alpha": 0.7} if name in ("ntl", "dist2", "del") else {}))
    ref = fn(logits, b["labels"])
    got = fn(logits, shift_targets(b["labels"]), labels_shifted=True)
    torch.testing.assert_close(got.loss, ref.loss)
    wrong = fn(logits, shift_targets(b["labels"]))  # the convention mixed up: another objective
    assert abs(float(wrong.loss.detach()) - float(ref.loss.detach())) > 1e-3
    if name in ("ntl", "dist2", "del", "mixce"):
        h, w = torch.randn(*b["labels"].shape, 8), torch.randn(len(char_tokenizer), 8)
        torch.testing.assert_close(fn.from_hidden(h, w, shift_targets(b["labels"]), labels_shifted=True).loss,
                                   fn.from_hidden(h, w, b["labels"]).loss)


# -- item 6: from_hidden under autocast ---------------------------------------------------------
@pytest.mark.parametrize("name", ["mle", "ntl", "dist2", "del", "mixce"])
def test_from_hidden_under_bf16_autocast(char_tokenizer, name):
    b = _batch(char_tokenizer, TEXTS)
    torch.manual_seed(0)
    V = len(char_tokenizer)
    h = torch.randn(*b["labels"].shape, 16, requires_grad=True)
    w = (torch.randn(V, 16) * 0.3).requires_grad_()
    fn = build_loss(name, char_tokenizer, **({"alpha": 0.5} if name not in ("mle", "mixce") else {}))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn.from_hidden(h, LinearHead(w, chunk_size=7), b["labels"])
        ref = fn(h @ w.t(), b["labels"])  # what the model's lm_head gives under autocast
    out.loss.backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    ref.loss.backward()
    assert gh.dtype == h.dtype and gw.dtype == w.dtype
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(gh, h.grad, rtol=5e-2, atol=5e-3)
    torch.testing.assert_close(gw, w.grad, rtol=5e-2, atol=5e-3)


# -- item 4: heads that post-process their logits -----------------------------------------------
def _arch(kind, vocab):
    import transformers as tf

    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    if kind == "granite":
        return tf.GraniteForCausalLM(tf.GraniteConfig(**common, logits_scaling=4.0))
    if kind == "gemma2":
        m = tf.Gemma2ForCausalLM(tf.Gemma2Config(**common, head_dim=16, final_logit_softcapping=5.0))
        with torch.no_grad():
            m.get_output_embeddings().weight.mul_(40.0)  # realistic logits: the cap is reached
        return m
    if kind == "cohere":
        return tf.CohereForCausalLM(tf.CohereConfig(**common, logit_scale=0.25))
    return tf.LlamaForCausalLM(tf.LlamaConfig(**common))


@pytest.mark.parametrize("kind", ["granite", "gemma2", "cohere", "llama"])
def test_from_hidden_applies_the_models_logit_transform(char_tokenizer, kind):
    from numlearn.integrations.hf import linear_head, logit_transform

    model = _arch(kind, len(char_tokenizer)).float()
    b = _batch(char_tokenizer, TEXTS)
    fn = build_loss("del", char_tokenizer, alpha=0.8)
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    ref = fn(out.logits, b["labels"])
    ref.loss.backward()
    g_ref = _grads(model)
    model.zero_grad()
    hidden = model.get_decoder()(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    head = model.get_output_embeddings()
    tr = logit_transform(model)
    assert tr.identity == (kind == "llama")
    got = fn.from_hidden(hidden, linear_head(model, chunk_size=5), b["labels"])
    assert linear_head(model).weight is head.weight and linear_head(model).bias is getattr(head, "bias", None)
    got.loss.backward()
    torch.testing.assert_close(got.loss, ref.loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_grads(model), g_ref, rtol=1e-4, atol=1e-5)
    if kind == "gemma2":  # without the cap the loss is another number entirely
        plain = fn.from_hidden(hidden.detach(), head.weight.detach(), b["labels"])
        assert float(plain.loss) > 1.5 * float(ref.loss.detach())


def test_fused_bridge_refuses_a_head_it_cannot_reproduce(char_tokenizer):
    from numlearn.integrations.hf import LossBridge

    model = _llama(len(char_tokenizer))
    b = _batch(char_tokenizer, TEXTS[:2])
    bridge = LossBridge(build_loss("del", char_tokenizer, alpha=1.0), fused_linear=True)
    bridge.bind_model(model)
    out = model(input_ids=b["input_ids"], logits_to_keep=1)
    out.logits = out.logits * 3.0 + 1.0  # a post-processing numlearn does not know
    with pytest.raises(ValueError, match="post-processes logits"):
        bridge.compute(out, b["labels"])
    out = model(input_ids=b["input_ids"], logits_to_keep=1)
    bridge2 = LossBridge(build_loss("del", char_tokenizer, alpha=1.0), fused_linear=True)
    bridge2.bind_model(_llama(len(char_tokenizer)))  # a fresh model: its own hook
    bridge.compute(out, b["labels"])  # the first bridge is checked once; the model's real logits pass


# -- item 3: custom loops -----------------------------------------------------------------------
def _big_batch_grads(tok, fn, texts, seed=0):
    model = _llama(len(tok), seed)
    b = _batch(tok, texts)
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    fn(out.logits, b["labels"]).loss.backward()
    return _grads(model)


def test_plain_loop_with_step_counts_equals_one_big_batch(char_tokenizer):
    fn = build_loss("del", char_tokenizer, alpha=1.0)
    ref = _big_batch_grads(char_tokenizer, fn, TEXTS)
    model = _llama(len(char_tokenizer))
    micro = [_batch(char_tokenizer, TEXTS[i : i + 2]) for i in range(0, 8, 2)]
    counts = step_counts(micro, fn)
    assert counts.num_microbatches_in_step == 4
    for b in micro:
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        fn(out.logits, b["labels"], step=counts).loss.backward()
    torch.testing.assert_close(_grads(model), ref, rtol=1e-5, atol=1e-7)
    # the trap: per-micro-batch means summed over 4 micro-batches is a different gradient
    model.zero_grad()
    for b in micro:
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        fn(out.logits, b["labels"]).loss.backward()
    assert not torch.allclose(_grads(model), ref, rtol=1e-2)


def test_accelerate_loop_with_backward_scale_equals_one_big_batch(char_tokenizer):
    from accelerate import Accelerator

    fn = build_loss("del", char_tokenizer, alpha=1.0)
    ref = _big_batch_grads(char_tokenizer, fn, TEXTS)
    acc = Accelerator(gradient_accumulation_steps=4, cpu=True)
    model = acc.prepare(_llama(len(char_tokenizer)))
    micro = [_batch(char_tokenizer, TEXTS[i : i + 2]) for i in range(0, 8, 2)]
    counts = step_counts(micro, fn, all_reduce=lambda t: acc.reduce(t, reduction="sum"))
    for b in micro:
        with acc.accumulate(model):
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
            loss = fn(out.logits, b["labels"], step=counts).loss
            acc.backward(loss * backward_scale(acc))
    torch.testing.assert_close(_grads(model), ref, rtol=1e-5, atol=1e-7)
    assert backward_scale(acc) == 4.0


def test_step_counts_takes_shift_labels_as_already_shifted(char_tokenizer):
    fn = build_loss("del", char_tokenizer, alpha=1.0)
    b = _batch(char_tokenizer, TEXTS)
    ref = step_counts([b], fn)
    got = step_counts([{"shift_labels": shift_targets(b["labels"]), "labels": b["labels"][:, :1]}], fn)
    assert got == ref and ref.num_digits_in_batch > 0


def test_step_counts_errors_name_the_problem():
    with pytest.raises(ValueError, match="no 'labels'"):
        step_counts([{"input_ids": torch.zeros(1, 2)}])
    with pytest.raises(ValueError, match="no micro-batch"):
        step_counts([])


# -- items 1 and 2: the HF Trainer --------------------------------------------------------------
class _DS(torch.utils.data.Dataset):
    def __init__(self, tok, texts):
        self.items = []
        for t in texts:
            x = tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            self.items.append({"input_ids": x, "labels": [IGNORE_INDEX] + x[1:]})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _collate(pad):
    def f(feats):
        T = max(len(f["input_ids"]) for f in feats)
        ids = torch.tensor([f["input_ids"] + [pad] * (T - len(f["input_ids"])) for f in feats])
        lab = torch.tensor([f["labels"] + [IGNORE_INDEX] * (T - len(f["labels"])) for f in feats])
        mask = torch.tensor([[1] * len(f["input_ids"]) + [0] * (T - len(f["input_ids"])) for f in feats])
        return {"input_ids": ids, "labels": lab, "attention_mask": mask}
    return f


def _args(tmp_path, bs, ga, lr=1e-3, **kw):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=bs, gradient_accumulation_steps=ga,
                             per_device_eval_batch_size=4, max_steps=1, learning_rate=lr, lr_scheduler_type="constant",
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
                             disable_tqdm=True, max_grad_norm=1e9, dataloader_num_workers=0, **kw)


def test_plain_compute_loss_func_refuses_accumulation_and_is_exact_without(char_tokenizer, tmp_path):
    from transformers import Trainer

    from numlearn.integrations.hf import LossBridge, NumlearnTrainer

    fn = build_loss("del", char_tokenizer, alpha=1.0)
    ds = _DS(char_tokenizer, TEXTS)
    tr = Trainer(model=_llama(len(char_tokenizer)), args=_args(tmp_path / "a", 2, 4), train_dataset=ds,
                 data_collator=_collate(char_tokenizer.pad_token_id), compute_loss_func=LossBridge(fn))
    with pytest.raises(ValueError, match="plain compute_loss_func.*NumlearnTrainer"):
        tr.train()
    losses = {}
    for name, cls, kw in [("plain", Trainer, {"compute_loss_func": LossBridge(fn)}),
                          ("numlearn", NumlearnTrainer, {"loss_fn": fn})]:
        tr = cls(model=_llama(len(char_tokenizer)), args=_args(tmp_path / name, 8, 1, lr=0.0), train_dataset=ds,
                 data_collator=_collate(char_tokenizer.pad_token_id), **kw)
        losses[name] = tr.train().training_loss
    assert losses["plain"] == pytest.approx(losses["numlearn"], rel=1e-6)


@pytest.mark.parametrize("ga", [1, 2, 4])
def test_numlearn_trainer_is_exact_under_accumulation(char_tokenizer, tmp_path, ga):
    from transformers import TrainerCallback

    from numlearn.integrations.hf import NumlearnTrainer

    fn = build_loss("del", char_tokenizer, alpha=1.0)
    ref = _big_batch_grads(char_tokenizer, fn, TEXTS)
    got = {}

    class Cap(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            got["g"] = _grads(model).clone()

    import transformers
    transformers.set_seed(0)
    tr = NumlearnTrainer(model=_llama(len(char_tokenizer)), args=_args(tmp_path, 8 // ga, ga), loss_fn=fn,
                         train_dataset=_DS(char_tokenizer, TEXTS), data_collator=_collate(char_tokenizer.pad_token_id),
                         callbacks=[Cap()])
    tr._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(tr.train_dataset)
    tr.train()
    torch.testing.assert_close(got["g"], ref, rtol=1e-5, atol=1e-7)


def test_eval_loss_uses_the_eval_batch_counts(char_tokenizer, tmp_path):
    from numlearn.integrations.hf import NumlearnTrainer

    fn = build_loss("del", char_tokenizer, alpha=1.0)
    train_ds, eval_ds = _DS(char_tokenizer, TEXTS), _DS(char_tokenizer, TEXTS[:4])
    tr = NumlearnTrainer(model=_llama(len(char_tokenizer)), args=_args(tmp_path, 2, 4, lr=0.0), loss_fn=fn,
                         train_dataset=train_ds, eval_dataset=eval_ds,
                         data_collator=_collate(char_tokenizer.pad_token_id))
    before = tr.evaluate()["eval_loss"]
    tr.train()
    after = tr.evaluate()["eval_loss"]
    assert after == pytest.approx(before, rel=1e-6)  # lr = 0: the model did not change
    model = tr.model.eval()
    b = _collate(char_tokenizer.pad_token_id)([eval_ds[i] for i in range(4)])
    with torch.no_grad():
        direct = fn(model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"])
    assert before == pytest.approx(float(direct.loss.detach()), rel=1e-5)


# -- item 9: a raw tokenizers.Tokenizer ---------------------------------------------------------
def test_raw_tokenizers_tokenizer_is_accepted(char_tokenizer):
    from numlearn.losses import digit_token_ids

    assert digit_token_ids(char_tokenizer.backend_tokenizer) == digit_token_ids(char_tokenizer)
    with pytest.raises(TypeError, match="tokenizers.Tokenizer"):
        digit_token_ids(object())


# -- item 7: TRL's SFTTrainer -------------------------------------------------------------------
def _sft(tok, tmp_path, fn, bs, ga, steps=1, bridge=None, rows=None, with_trainer=False, **cfg):
    """The first optimizer step's gradient (Adam would amplify round-off in near-zero gradients);
    rows: the dataset (prompt/completion pairs of TEXTS by default)."""
    pytest.importorskip("trl")
    import transformers
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from numlearn.integrations.trl import NumlearnSFTTrainer

    ds = Dataset.from_list(rows if rows is not None else
                           [{"prompt": t[: len(t) // 2], "completion": t[len(t) // 2 :]} for t in TEXTS])
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=bs, gradient_accumulation_steps=ga,
                     max_steps=steps, learning_rate=1e-2, lr_scheduler_type="constant", logging_steps=1,
                     save_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True, max_grad_norm=1e9,
                     dataloader_num_workers=0, shuffle_dataset=False, **cfg)
    transformers.set_seed(0)
    model = _llama(len(tok))
    kw = {"loss_bridge": bridge} if bridge is not None else {"loss_fn": fn} if fn is not None else {}
    cls = SFTTrainer if not kw else NumlearnSFTTrainer
    got = {}

    class Cap(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **k):
            got.setdefault("g", _grads(model).clone())

    tr = cls(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[Cap()], **kw)
    tr._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(tr.train_dataset)
    tr.train()
    return (got["g"], tr) if with_trainer else got["g"]


def _rel(a, b):
    return float((a - b).norm() / b.norm())


# TRL's batches are not bit-reproducible across layouts: its own nll gradient differs by 5e-4 (relative
# L2) between GA 1 and GA 2 on these batches, and ours from its fused head by 2e-3 at GA 1 (both fp32,
# measured). A normalisation error is a factor, not a per-mille: the aux term counted per micro-batch
# moves this gradient by > 10 %.
TRL_TOL = 1e-2


def _trl_own_loss_runs_here():
    """TRL's own SFT loss (the reference of two tests) on this machine: TRL 1.15's chunked log-prob needs
    triton, which a CPU machine lacks (fixed in 1.16); numlearn's trainer never goes through it."""
    import trl
    from packaging.version import Version

    if Version(trl.__version__) < Version("1.16"):
        pytest.skip(f"TRL {trl.__version__}'s own SFT loss needs triton on CPU (its reference gradient); "
                    "numlearn's trainer is tested at this version by the other TRL tests")


def test_trl_trainer_with_alpha_0_matches_trls_own_nll(char_tokenizer, tmp_path):
    _trl_own_loss_runs_here()
    ours = _sft(char_tokenizer, tmp_path / "a", build_loss("mle", char_tokenizer), 4, 1)
    theirs = _sft(char_tokenizer, tmp_path / "b", None, 4, 1)
    assert _rel(ours, theirs) < TRL_TOL


@pytest.mark.parametrize("extra", [{}, {"padding_free": True, "max_length": None}, {"fused": True},
                                   {"packing": True, "packing_strategy": "bfd", "max_length": 32}])
def test_trl_trainer_is_exact_under_accumulation(char_tokenizer, tmp_path, extra):
    from numlearn.integrations.hf import LossBridge

    fused = extra.pop("fused", False)

    def run(tag, bs, ga):
        bridge = LossBridge(build_loss("del", char_tokenizer, alpha=1.0), fused_linear=fused, chunk_size=5)
        return _sft(char_tokenizer, tmp_path / tag, None, bs, ga, bridge=bridge, **extra)

    one, two = run("ga1", 4, 1), run("ga2", 2, 2)
    assert _rel(two, one) < TRL_TOL


def _step_digits(trainer):
    return next(h["train/step_digits"] for h in trainer.state.log_history if "train/step_digits" in h)


def _digits(s):
    return sum(c.isdigit() for c in s)


@pytest.mark.parametrize("completion_only", [True, False])
def test_trl_completion_only_trains_the_completions_digits_only(char_tokenizer, tmp_path, completion_only):
    """Prompt/completion rows: with TRL's completion-only loss (its default) the numeric term sees
    the completions' digits and no prompt digit; without it, every digit of the text (the first
    prediction of each sequence excepted, as no token precedes it)."""
    rows = [{"prompt": t[: len(t) // 2], "completion": t[len(t) // 2 :]} for t in TEXTS[:4]]
    _, tr = _sft(char_tokenizer, tmp_path, build_loss("del", char_tokenizer, alpha=1.0), 4, 1, rows=rows,
                 with_trainer=True, completion_only_loss=completion_only)
    want = sum(_digits(r["completion"]) for r in rows) if completion_only else \
        sum(_digits((r["prompt"] + r["completion"])[1:]) for r in rows)
    assert want != sum(_digits(r["completion"]) for r in rows) or completion_only  # the two cases differ
    assert _step_digits(tr) == want


CHAT = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{{ eos_token }}"
        "{% endgeneration %}{% else %}{{ m['content'] }} {% endif %}{% endfor %}")


def test_trl_assistant_only_loss(char_tokenizer, tmp_path):
    """Conversations with ``assistant_only_loss=True``: the numeric term counts the assistant turns'
    digits only, and with alpha = 0 the gradient is TRL's own nll's under the same mask."""
    import copy

    tok = copy.deepcopy(char_tokenizer)
    tok.chat_template = CHAT
    rows = [{"messages": [{"role": "user", "content": t[: len(t) // 2]},
                          {"role": "assistant", "content": t[len(t) // 2 :]}]} for t in TEXTS[:4]]
    g, tr = _sft(tok, tmp_path / "del", build_loss("del", tok, alpha=1.0), 4, 1, rows=rows, with_trainer=True,
                 assistant_only_loss=True)
    assert _step_digits(tr) == sum(_digits(r["messages"][1]["content"]) for r in rows)
    _trl_own_loss_runs_here()
    ours = _sft(tok, tmp_path / "mle", build_loss("mle", tok), 4, 1, rows=rows, assistant_only_loss=True)
    theirs = _sft(tok, tmp_path / "trl", None, 4, 1, rows=rows, assistant_only_loss=True)
    assert _rel(ours, theirs) < TRL_TOL


class _LoraHead(torch.nn.Module):
    """What PEFT's LoraLayer exposes on a wrapped lm_head (base_layer, lora_A, lora_B): the fused path would
    read ``weight`` (the base's) and leave the adapter without a gradient (issue 44, item 1)."""

    def __init__(self, base: torch.nn.Linear, r: int = 4):
        super().__init__()
        self.base_layer = base
        self.lora_A = torch.nn.ModuleDict({"default": torch.nn.Linear(base.in_features, r, bias=False)})
        self.lora_B = torch.nn.ModuleDict({"default": torch.nn.Linear(r, base.out_features, bias=False)})
        torch.nn.init.zeros_(self.lora_B["default"].weight)  # PEFT's default init: B = 0

    @property
    def weight(self):
        return self.base_layer.weight

    def forward(self, x):
        return self.base_layer(x) + self.lora_B["default"](self.lora_A["default"](x))


def test_fused_bridge_refuses_an_adapter_on_the_head_naming_the_cause(char_tokenizer):
    from numlearn.integrations.hf import LossBridge

    model = _llama(len(char_tokenizer))
    model.lm_head = _LoraHead(model.lm_head)
    bridge = LossBridge(build_loss("del", char_tokenizer, alpha=1.0), fused_linear=True)
    with pytest.raises(ValueError, match=r"wrapped by an adapter \(_LoraHead, e.g. LoRA on lm_head\).*no gradient"):
        bridge.bind_model(model)
    LossBridge(build_loss("del", char_tokenizer, alpha=1.0), fused_linear=False).bind_model(model)  # logits path: fine


@pytest.mark.parametrize("init_lora_weights", [True, False], ids=["B=0", "non-zero"])
def test_real_peft_lora_on_the_head_is_refused_on_the_fused_path_and_trained_on_the_logits_path(
        char_tokenizer, tmp_path, init_lora_weights):
    """Issue 44, item 1, with PEFT itself: a LoRA adapter on ``lm_head`` (both inits) is refused by the fused
    path in one line naming the adapter -- the bridge and ``NumlearnTrainer(fused_linear=True)`` -- and the
    logits path gives the adapter its gradient. By hand, what the refusal prevents: ``from_hidden`` on the
    base weight is not the adapted head's loss (non-zero adapter) and gives ``lora_B`` nothing to learn from."""
    peft = pytest.importorskip("peft", reason="PEFT is in the dev extra: make setup (or pip install peft)")
    from numlearn.integrations.hf import LossBridge, NumlearnTrainer

    pm = peft.get_peft_model(_llama(len(char_tokenizer)), peft.LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["lm_head", "q_proj"], init_lora_weights=init_lora_weights))
    loss_fn = build_loss("del", char_tokenizer, alpha=1.0)
    with pytest.raises(ValueError, match=r"wrapped by an adapter \(Linear, e.g. LoRA on lm_head\).*no gradient"):
        LossBridge(loss_fn, fused_linear=True).bind_model(pm)
    with pytest.raises(ValueError, match=r"wrapped by an adapter"):
        NumlearnTrainer(model=pm, args=_args(tmp_path, 2, 1), loss_fn=loss_fn, fused_linear=True,
                        train_dataset=_DS(char_tokenizer, TEXTS), data_collator=_collate(char_tokenizer.pad_token_id))
    b = _batch(char_tokenizer, TEXTS[:4])
    out = pm(input_ids=b["input_ids"], attention_mask=b["attention_mask"], output_hidden_states=True)
    loss = loss_fn(out.logits, b["labels"]).loss
    loss.backward()
    head = pm.get_output_embeddings()
    assert float(head.lora_B["default"].weight.grad.norm()) > 1e-3  # the logits path trains the adapter
    base_only = loss_fn.from_hidden(out.hidden_states[-1].detach(), head.base_layer.weight, b["labels"]).loss
    assert (abs(float(base_only.detach()) - float(loss.detach())) > 1e-3) == (not init_lora_weights)


def _fused_ce_warnings(make):
    import warnings

    from numlearn.losses import base

    base._WARNED.difference_update({k for k in base._WARNED if k.startswith("fused CE patch: ")})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make()
    return [str(w.message) for w in seen if "fused linear cross-entropy" in str(w.message)]


def test_a_forward_patched_with_another_fused_ce_is_named_on_the_logits_path(char_tokenizer, tmp_path):
    """Issue 44, item 2: a forward patched by Liger/Unsloth computes its fused CE only when given labels;
    numlearn's trainers pop them, so the model builds full logits and the user's memory saving was gone
    without a word. Now a warning names the patcher and the fused path; the fused path itself is silent.
    Stand-in here (a forward defined in a module named like Liger's); the real patch: the next test."""
    from transformers import LlamaForCausalLM

    from numlearn.integrations.hf import LossBridge, NumlearnTrainer, fused_ce_patch

    class Patched(LlamaForCausalLM):
        def forward(self, *a, **kw):
            return super().forward(*a, **kw)
    Patched.forward.__module__ = "liger_kernel.transformers.model.llama"
    model = Patched(_llama(len(char_tokenizer)).config)
    assert fused_ce_patch(model) == "liger_kernel" and fused_ce_patch(_llama(len(char_tokenizer))) is None
    loss_fn = build_loss("del", char_tokenizer, alpha=1.0)
    msgs = _fused_ce_warnings(lambda: LossBridge(loss_fn).bind_model(model))
    assert len(msgs) == 1 and "patched by liger_kernel" in msgs[0] and "fused_linear=True" in msgs[0]
    assert not _fused_ce_warnings(lambda: LossBridge(loss_fn, fused_linear=True).bind_model(model))
    msgs = _fused_ce_warnings(lambda: NumlearnTrainer(
        model=model, args=_args(tmp_path, 2, 1), loss_fn=loss_fn, train_dataset=_DS(char_tokenizer, TEXTS),
        data_collator=_collate(char_tokenizer.pad_token_id)))
    assert len(msgs) == 1


def test_real_liger_flce_patch_warns_on_the_logits_path_and_the_fused_path_is_exact(char_tokenizer):
    """The same with Liger-Kernel's own patch in its FLCE-only form (it runs on CPU: without labels its forward
    is plain torch). The fused path under the patched forward gives the unpatched logits path's loss and
    gradient. The patch is class-level: the original forward is restored afterwards."""
    pytest.importorskip("liger_kernel", reason="pip install liger-kernel (make test-core installs it)")
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers.models.llama import modeling_llama

    from numlearn.integrations.hf import LossBridge

    loss_fn = build_loss("del", char_tokenizer, alpha=1.0)
    b = _batch(char_tokenizer, TEXTS[:4])
    ref_model = _llama(len(char_tokenizer))
    ref = loss_fn(ref_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"]).loss
    ref.backward()
    original = modeling_llama.LlamaForCausalLM.forward
    try:
        apply_liger_kernel_to_llama(rope=False, rms_norm=False, swiglu=False, cross_entropy=False,
                                    fused_linear_cross_entropy=True)
        model = _llama(len(char_tokenizer))
        assert type(model).forward.__module__.startswith("liger_kernel")
        msgs = _fused_ce_warnings(lambda: LossBridge(loss_fn).bind_model(model))
        assert len(msgs) == 1 and "patched by liger_kernel" in msgs[0]
        bridge = LossBridge(loss_fn, fused_linear=True)
        assert not _fused_ce_warnings(lambda: bridge.bind_model(model))
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], logits_to_keep=1)
        assert out.logits.shape[1] == 1  # the patched forward serves the fused path: no [B, T, V] logits
        got = bridge.compute(out, b["labels"]).loss
        got.backward()
    finally:
        modeling_llama.LlamaForCausalLM.forward = original
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    assert torch.allclose(_grads(model), _grads(ref_model), atol=1e-5)


def test_the_trainer_says_which_strategy_it_got(char_tokenizer, tmp_path):
    """Issue 44, item 5: under a user's own `accelerate launch` on CPU, FSDP2 silently ran as DDP; the trainer
    now reports what accelerate runs (and warns when FSDP was asked for and is not what runs)."""
    import warnings

    from numlearn.integrations.hf import NumlearnTrainer

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tr = NumlearnTrainer(model=_llama(len(char_tokenizer)), args=_args(tmp_path, 2, 1),
                             loss_fn=build_loss("del", char_tokenizer, alpha=1.0),
                             train_dataset=_DS(char_tokenizer, TEXTS), data_collator=_collate(char_tokenizer.pad_token_id))
    assert tr.numlearn_strategy() == "single"
    assert not [w for w in seen if "FSDP was asked for" in str(w.message)]
    from types import SimpleNamespace

    def under(kind):  # accelerate's state is a process-wide singleton: read a stand-in, never mutate it
        return NumlearnTrainer.numlearn_strategy(SimpleNamespace(accelerator=SimpleNamespace(
            state=SimpleNamespace(distributed_type=f"DistributedType.{kind}"))))
    assert (under("MULTI_CPU"), under("MULTI_GPU"), under("FSDP"), under("NO")) == ("ddp", "ddp", "fsdp", "single")
