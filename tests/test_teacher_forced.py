"""The teacher-forced digit metrics are the evaluator's (numlearn.evaluation.teacher_forced): values
checked by hand on a model whose logits are fixed, any data with numbers (GSM8K solutions), and one
evaluation writing them into each of its result files while training records training only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from numlearn.evaluation.teacher_forced import heldout_metrics, teacher_forced_digits, teacher_forced_records
from numlearn.losses import IGNORE_INDEX, digit_token_ids, shift_targets

CONF = Path(__file__).resolve().parents[1] / "conf"


class _FixedLM(torch.nn.Module):
    """The same logits ``z`` at every position, whatever the input."""

    def __init__(self, z):
        super().__init__()
        self.z = torch.nn.Parameter(z.clone())

    def forward(self, input_ids, attention_mask=None):
        return type("Out", (), {"logits": self.z.expand(*input_ids.shape, -1)})()


def test_metrics_by_hand_on_fixed_logits(char_tokenizer):
    from numlearn.data.collate import PadCollator, tokenize_records

    tok = char_tokenizer
    vocab = digit_token_ids(tok)
    z = torch.zeros(len(tok))
    z[list(vocab.digit_ids)] = torch.tensor([3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0])  # digit 0 the most likely
    z[tok.eos_token_id] = 1.5
    records = [{"instruction": "1+1", "output": "20"}, {"instruction": "9-1", "output": "8.0"}]
    m = teacher_forced_digits(_FixedLM(z), tok, records, vocab, max_length=512)
    # by hand: the response digits are 2, 0, 8, 0; p over the ten digits is softmax of the fixed ten
    p = torch.softmax(z[list(vocab.digit_ids)], 0)
    targets = [2, 0, 8, 0]
    assert m["n_digits"] == 4 and m["n_examples"] == 2
    assert m["digit_acc"] == pytest.approx(2 / 4)  # argmax is 0: right on the two zeros only
    assert m["digit_nll"] == pytest.approx(sum(-math.log(p[t]) for t in targets) / 4, rel=1e-5)
    assert m["digit_entropy"] == pytest.approx(float(-(p * p.log()).sum()), rel=1e-5)  # over the ten, not the vocab
    # token CE over every response position (digits, ".", EOS), with the full vocabulary's softmax
    feats, _ = tokenize_records(records, tok, 512)
    t = shift_targets(PadCollator(tok.pad_token_id)(feats)["labels"])
    logp = torch.log_softmax(z, 0)
    want = float(-logp[t[t != IGNORE_INDEX]].mean())
    assert m["ce"] == pytest.approx(want, rel=1e-5)
    assert m["mass_by_distance"][0] == pytest.approx(float(sum(p[t] for t in targets) / 4), rel=1e-5)
    # each record's own sums, in order (what a bootstrap over problems resamples): "20" then "8.0"
    per = m["by_example"]
    assert per["n_digits"] == [2, 2] and per["correct"] == [1, 1]
    assert per["nll"][0] == pytest.approx(float(-p[2].log() - p[0].log()), rel=1e-5)
    assert per["nll"][1] == pytest.approx(float(-p[8].log() - p[0].log()), rel=1e-5)


def test_bf16_autocast_stays_within_bf16_rounding_and_is_recorded(tiny_tokenizer):
    """eval.teacher_forced.dtype=bfloat16 (the SmolLM2 GSM8K study: 2x on a CPU with AMX) runs the forward
    under autocast; the metrics move by bf16 rounding only, and an unknown dtype is refused."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4)
    model = AutoModelForCausalLM.from_config(cfg)
    recs = [{"instruction": f"{a}+{a}", "output": f"{a} plus {a} is {2 * a}. The answer is {2 * a}."}
            for a in (12, 305, 47, 9)]
    f32 = heldout_metrics(model, tiny_tokenizer, recs, 256)
    b16 = heldout_metrics(model, tiny_tokenizer, recs, 256, dtype="bfloat16")
    assert f32["n_digits"] == b16["n_digits"] > 0
    assert b16["digit_nll"] == pytest.approx(f32["digit_nll"], rel=2e-2)
    assert b16["digit_nll"] != f32["digit_nll"]  # it did run in bf16
    assert sum(f32["by_example"]["n_digits"]) == f32["n_digits"]
    with pytest.raises(ValueError, match="dtype='float16'"):
        heldout_metrics(model, tiny_tokenizer, recs, 256, dtype="float16")


def test_a_tokenizer_without_digits_measures_nothing(spacey_number_tokenizer):
    assert heldout_metrics(None, spacey_number_tokenizer, [], 64) == {}


def test_any_data_with_numbers_gsm8k_solutions(data_dir, tiny_tokenizer):
    tcfg = OmegaConf.create({"source": "file", "file": "benchmarks/gsm8k/gsm8k.jsonl", "n": 3, "max_length": 256})
    recs = teacher_forced_records(tcfg, OmegaConf.create({}), data_dir, data_dir)
    assert len(recs) == 3 and recs[0]["output"].endswith("The answer is 18.")  # GSM8K's '#### 18', converted
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", vocab_size=len(tiny_tokenizer), hidden_size=16, intermediate_size=32,
                               num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    torch.manual_seed(0)
    m = heldout_metrics(AutoModelForCausalLM.from_config(cfg), tiny_tokenizer, recs, 256)
    assert m["n_examples"] == 3 and m["n_digits"] > 20 and 0 <= m["digit_acc"] <= 1
    assert m["digit_entropy"] == pytest.approx(math.log(10), abs=0.05)  # an untrained model: near uniform


@pytest.mark.parametrize("tcfg, match", [
    ({"source": "wiki", "n": 3}, "choose one of"),
    ({"source": "file", "n": 3}, "needs eval.teacher_forced.file"),
    ({"source": "synthetic", "n": 0}, ">= 1"),
    ({"source": "file", "file": "nope.jsonl", "n": 3}, "data file not found"),
])
def test_bad_teacher_forced_config_is_a_clear_error(tmp_path, tcfg, match):
    with pytest.raises(ValueError, match=match):
        teacher_forced_records(OmegaConf.create(tcfg), OmegaConf.create({}), tmp_path, tmp_path)


def test_evaluation_measures_and_training_does_not(tmp_path):
    from numlearn.evaluate import run_evaluation
    from numlearn.training.run import train

    over = ["model.config.hidden_size=32", "model.config.intermediate_size=64", "model.config.num_hidden_layers=2",
            "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2", "model.vocab_size=300",
            "data.n_train=200", "train=smoke", "loss=del", "loss.alpha=0.5", f"paths.output_dir={tmp_path}/out",
            f"paths.cache_dir={tmp_path}/cache", "eval.teacher_forced.n=12", "eval.benchmarks.synthetic_test.generator.n=4",
            "eval.benchmarks.synthetic_ood.generator.n=3", "eval.max_new_tokens_cap=4", "eval.modes=[cot]"]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        run_dir = train(compose("config", overrides=over))
        files = run_evaluation(compose("evaluate", overrides=over))
    meta = json.loads((run_dir / "run.json").read_text())
    assert "heldout" not in meta and meta["schema"] == 2  # training records training only
    res = [json.loads(f.read_text()) for f in files]
    assert len(res) == 2 and all(r["schema"] == 2 for r in res)
    tf = res[0]["teacher_forced"]
    assert tf["n_examples"] == 12 and tf["source"] == "synthetic" and tf["n_digits"] > 0
    assert all(r["teacher_forced"] == tf for r in res)  # once per model, in every result of the evaluation
    # the same numbers as measuring the saved model directly on the data seed's test split
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from numlearn.records import ResultRecord

    recs = teacher_forced_records(OmegaConf.create({"source": "synthetic", "n": 12}), OmegaConf.create({"seed": 0}),
                                  tmp_path, tmp_path / "cache")
    direct = heldout_metrics(AutoModelForCausalLM.from_pretrained(run_dir / "final"),
                             AutoTokenizer.from_pretrained(run_dir / "final"), recs, 256)
    assert direct == {k: tf[k] for k in direct}
    assert ResultRecord.read(files[0]).heldout == tf  # what the held-out tables read


class _VLLMLike:
    """A backend that holds no torch model, as vLLM's does: it answers, and records when it is closed."""

    name = "vllm"

    def __init__(self, events):
        self.events, self.stats = events, {"generated_tokens": 0, "generate_seconds": 0.0}

    def generate(self, prompts, sampling):
        self.events.append("generate")
        return ["The answer is 1."] * len(prompts)

    def describe(self):
        return {"backend": self.name, "dtype": "bfloat16"}

    def close(self):
        self.events.append("close")


@pytest.mark.parametrize("device_override, expected", [([], "cuda"), (["eval.teacher_forced.device=cpu"], "cpu")])
def test_a_vllm_evaluations_teacher_forced_pass_runs_on_its_device_after_the_engine_is_released(
        tmp_path, monkeypatch, device_override, expected):
    """With a generation backend that holds no torch model, the teacher-forced pass comes after every generation,
    after the engine is closed, on the GPU where there is one (CUDA is faked here; the model then loads on the CPU
    that exists), or where eval.teacher_forced.device says; its numbers are the hf path's."""
    from numlearn.evaluate import run_evaluation
    from numlearn.evaluation import recipe, teacher_forced
    from numlearn.training.run import train

    over = ["model.config.hidden_size=32", "model.config.intermediate_size=64", "model.config.num_hidden_layers=2",
            "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2", "model.vocab_size=300",
            "data.n_train=100", "train=smoke", "train.max_steps=2", f"paths.output_dir={tmp_path}/out",
            f"paths.cache_dir={tmp_path}/cache", "eval.teacher_forced.n=6", "eval.benchmarks.synthetic_test.generator.n=3",
            "eval.benchmarks.synthetic_ood.generator.n=2", "eval.max_new_tokens_cap=4", "eval.modes=[cot]"]
    events, devices = [], []
    real_measure = teacher_forced.measure

    def measure(model_path, tcfg, records, model=None, tokenizer=None, device="cpu"):
        events.append("measure")
        devices.append(device)
        return real_measure(model_path, tcfg, records, model, tokenizer, device="cpu")

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        train(compose("config", overrides=over))
        hf_files = run_evaluation(compose("evaluate", overrides=over))
        monkeypatch.setattr(recipe, "backend_from_config", lambda ecfg, path, seed=0: _VLLMLike(events))
        monkeypatch.setattr(teacher_forced, "measure", measure)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "a faked GPU")  # the provenance asks
        files = run_evaluation(compose("evaluate", overrides=[*over, f"eval_dir={tmp_path}/vllm", *device_override]))
    assert devices == [expected]
    assert events.index("close") == events.index("measure") - 1 and events.count("generate") == 2
    tf = json.loads(files[0].read_text())["teacher_forced"]
    assert {k: tf[k] for k in ("digit_acc", "digit_nll", "n_examples")} == \
        {k: json.loads(hf_files[0].read_text())["teacher_forced"][k] for k in ("digit_acc", "digit_nll", "n_examples")}


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_top_layer_fine_tune_reads_its_frozen_layers_from_the_cache_with_the_same_numbers(tmp_path, tiny_tokenizer,
                                                                                             arch):
    """prefix_cache: the first model fills the cache (every batch computed), a model whose top layer differs reads
    every batch from it and gets its own full forward's numbers; a model whose bottom layer differs never reads the
    others' states (its own key: computed again), and still gets its own numbers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from numlearn.evaluation.prefix_cache import PrefixLogits

    cfg = AutoConfig.for_model(arch, vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64,
                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg)
    recs = [{"instruction": f"{a}+{a}", "output": f"{a} plus {a} is {2 * a}. The answer is {2 * a}."}
            for a in (12, 305, 47, 9, 1234)]

    def both(model):
        full = heldout_metrics(model, tiny_tokenizer, recs, 256, batch_size=2)
        pl = PrefixLogits(tmp_path / "cache", frozen_layers=2)
        cached = heldout_metrics(model, tiny_tokenizer, recs, 256, batch_size=2, logits_fn=pl)
        return full, cached, (pl.hits, pl.misses)

    def changed(layer: int, seed: int):
        m = AutoModelForCausalLM.from_config(cfg)
        m.load_state_dict(base.state_dict())
        torch.manual_seed(seed)
        with torch.no_grad():
            for p in m.model.layers[layer].parameters():
                p.add_(0.2 * torch.randn_like(p))
        return m

    full, cached, counts = both(base)
    assert counts == (0, 3) and cached == full  # the filling pass is the full forward itself
    tuned = changed(3, 1)  # a top layer: the fine-tune's part
    full_t, cached_t, counts = both(tuned)
    assert counts == (3, 0) and full_t["digit_nll"] != full["digit_nll"]
    for k in ("ce", "digit_acc", "digit_nll", "digit_entropy"):
        assert cached_t[k] == pytest.approx(full_t[k], rel=1e-5, abs=1e-7), k
    other = changed(0, 2)  # a bottom layer: not this cache's model
    full_o, cached_o, counts = both(other)
    assert counts == (0, 3) and cached_o["digit_nll"] == pytest.approx(full_o["digit_nll"], rel=1e-5)


def test_a_prefix_cache_config_is_typed_and_a_layer_count_out_of_range_is_refused(tmp_path):
    from numlearn.evaluation.prefix_cache import frozen_key
    from numlearn.schema import TeacherForcedConfig
    from numlearn.testing import model

    tcfg = OmegaConf.merge(OmegaConf.structured(TeacherForcedConfig),
                           {"prefix_cache": {"dir": str(tmp_path), "frozen_layers": 20}})
    assert tcfg.prefix_cache.frozen_layers == 20
    with pytest.raises(Exception, match="frozen_layer"):
        OmegaConf.merge(OmegaConf.structured(TeacherForcedConfig), {"prefix_cache": {"dir": "d", "frozen_layer": 2}})
    m = model(20, num_hidden_layers=2)
    with pytest.raises(ValueError, match="frozen_layers=2: the model has 2 decoder layers; give 1..1"):
        frozen_key(m, 2)
    assert frozen_key(m, 1) == frozen_key(m, 1) != frozen_key(model(20, seed=1, num_hidden_layers=2), 1)
