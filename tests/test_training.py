"""The training module through the real HF Trainer, on the tiny model (CPU, seconds each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SMALL = ["model.config.hidden_size=32", "model.config.intermediate_size=64", "model.config.num_hidden_layers=2",
         "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2", "model.vocab_size=300",
         "data.n_train=200", "eval.teacher_forced.n=16", "train=smoke"]


def _cfg(tmp_path, *overrides):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose("config", overrides=[*SMALL, f"paths.output_dir={tmp_path}/out",
                                            f"paths.cache_dir={tmp_path.parent}/cache", *overrides])


def _metrics(run_dir: Path):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _registry() -> list[str]:
    from numlearn.losses import LOSSES

    return sorted(LOSSES)  # every registered loss (a new one is trained here without an edit)


@pytest.mark.parametrize("loss", _registry())
def test_each_loss_trains(tmp_path, loss):
    from transformers import AutoModelForCausalLM

    from numlearn.losses import capabilities
    from numlearn.training.run import train

    alpha = 0.5 if capabilities(loss).numeric_term else None
    extra = [f"loss.alpha={alpha}"] if alpha else []
    run_dir = train(_cfg(tmp_path, f"loss={loss}", *extra))
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "complete" and meta["global_step"] == 6
    logs = [m for m in _metrics(run_dir) if "loss" in m]
    assert logs and all(torch.isfinite(torch.tensor(m["loss"])) for m in logs)
    aux = [m["loss/aux"] for m in logs]
    if loss == "mle":
        assert all(a == 0 for a in aux)
    elif loss in ("ntl", "dist2", "del"):
        assert all(a > 0 for a in aux)
    assert all("train/digit_acc" in m and "train/digit_entropy" in m for m in logs)
    # parameters moved away from their initialisation
    trained = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    torch.manual_seed(0)
    from numlearn.training.model import build_model

    init = build_model(_cfg(tmp_path).model, __import__("transformers").AutoTokenizer.from_pretrained(run_dir / "final"),
                       tmp_path, seed=0)
    diff = sum((a - b).abs().sum().item() for a, b in zip(trained.parameters(), init.parameters()))
    assert diff > 0
    for key in ("git", "packages", "aux_effective_weight", "data"):
        assert key in meta
    assert (run_dir / "config.yaml").exists() and (run_dir / "final" / "tokenizer.json").exists()


class _GradCapture:
    def __init__(self):
        self.grads = None

    def __call__(self, trainer):
        from transformers import TrainerCallback

        cap = self

        class CB(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
                cap.grads = torch.cat([p.grad.detach().flatten().clone() for p in model.parameters() if p.grad is not None])

        trainer.add_callback(CB())


def _one_step_grads(tmp_path, monkeypatch, bs, accum, tag):
    from numlearn.training import hf_trainer, run

    cap = _GradCapture()
    orig = hf_trainer.NumlearnTrainer.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        cap(self)

    monkeypatch.setattr(hf_trainer.NumlearnTrainer, "__init__", init)
    cfg = _cfg(tmp_path / tag, "loss=del", "loss.alpha=0.5", "loss.aux_normalization=step", "train.max_steps=1",
               f"train.per_device_train_batch_size={bs}", f"train.gradient_accumulation_steps={accum}",
               "train.max_grad_norm=1e9", "train.learning_rate=1e-3", "train.logging_steps=1")
    run_dir = run.train(cfg)
    loss = [m for m in _metrics(run_dir) if "loss" in m][0]["loss"]
    return cap.grads, loss


def test_batch4_equals_batch1_times_accumulation4(tmp_path, monkeypatch):
    g1, l1 = _one_step_grads(tmp_path, monkeypatch, 4, 1, "a")
    g2, l2 = _one_step_grads(tmp_path, monkeypatch, 1, 4, "b")
    assert l1 == pytest.approx(l2, rel=1e-5)
    torch.testing.assert_close(g2, g1, rtol=1e-4, atol=1e-6)


def test_resume_after_interruption(tmp_path, monkeypatch):
    from numlearn.training import hf_trainer, run

    cfg = _cfg(tmp_path, "loss=del")
    orig = hf_trainer.MetricsJSONL.on_log

    def crash(self, args, state, control, logs=None, **kw):
        orig(self, args, state, control, logs=logs, **kw)
        if state.global_step >= 4:
            raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(hf_trainer.MetricsJSONL, "on_log", crash)
    with pytest.raises(KeyboardInterrupt):
        run.train(cfg)
    run_dir = Path(cfg.run_dir)
    assert (run_dir / "checkpoints" / "checkpoint-3").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    monkeypatch.setattr(hf_trainer.MetricsJSONL, "on_log", orig)
    run.train(cfg)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "complete" and meta["global_step"] == 6
    steps = [m["step"] for m in _metrics(run_dir) if "loss" in m]
    assert steps == [2, 4, 6]  # step 4 logged before the crash was dropped at the resume from 3, then redone
    assert meta["resumed_from"].endswith("checkpoint-3")
    losses = [m["loss"] for m in _metrics(run_dir) if "loss" in m]
    assert meta["train_metrics"]["train_loss"] == pytest.approx(sum(losses) / 3)  # whole run, not the resumed part
    # a third call finds the run complete and does nothing
    run.train(cfg)
    assert json.loads((run_dir / "run.json").read_text())["global_step"] == 6
    # force=true retrains from scratch: no resume from the old checkpoint, no step past max_steps
    forced = run.train(_cfg(tmp_path, "loss=del", "force=true"))
    meta = json.loads((forced / "run.json").read_text())
    assert meta["resumed_from"] is None and meta["global_step"] == 6
    assert [m["step"] for m in _metrics(forced) if "loss" in m] == [2, 4, 6]


@pytest.mark.long  # the default tier's time (make test-distributed and CI run it)
def test_alpha_multirun_leaves_one_run_dir_per_value(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    r = subprocess.run([sys.executable, "-m", "numlearn.train", "-m", "loss=del", "loss.alpha=0.1,0.3",
                        "experiment_name=sweep", f"paths.output_dir={tmp_path}/out",
                        f"paths.cache_dir={tmp_path}/cache", *SMALL, "train.max_steps=2"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    dirs = sorted(p.parent.parent.name for p in (tmp_path / "out" / "sweep").rglob("run.json"))
    assert dirs == ["alpha=0.1", "alpha=0.3"]


def test_wandb_offline_without_key(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc key
    import wandb
    from wandb.sdk.wandb_run import Run

    from numlearn.training.run import train

    logged, real_log = [], Run.log  # wandb.init rebinds wandb.log to the run's: record on the class
    monkeypatch.setattr(Run, "log", lambda self, d, *a, **k: logged.append(dict(d)) or real_log(self, d, *a, **k))
    run_dir = train(_cfg(tmp_path, "logger=wandb", "loss=del", "train.max_steps=2"))
    keys = {k for d in logged for k in d}
    # issue 47: HF's callback prefixed numlearn's own train/ keys again (train/train/digit_acc)
    assert "train/digit_acc" in keys and "train/loss/ce" in keys and not any(k.startswith("train/train/") for k in keys)
    assert wandb.run is None  # finished
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert offline, "no offline W&B run written"


def test_hf_datasets_path_with_local_file(tmp_path):
    from omegaconf import OmegaConf

    from numlearn.data.sources import load_source

    f = tmp_path / "mathinstruct.json"
    f.write_text(json.dumps([{"instruction": f"What is {i} + 1?", "output": f"The answer is {i + 1}", "source": "t"}
                             for i in range(5)]))
    cfg = OmegaConf.create({"name": "mi", "source": "hf", "hf_name": "json", "split": "train",
                            "load_kwargs": {"data_files": str(f)}, "limit": 3})
    recs = load_source(cfg, tmp_path, tmp_path)
    assert recs == [{"instruction": f"What is {i} + 1?", "output": f"The answer is {i + 1}"} for i in range(3)]


def test_length_grouped_batches_have_fewer_pads(tmp_path, monkeypatch):
    """train.sampling=group_by_length reaches the Trainer: the batches it trains on carry fewer pad
    tokens than random batches of the same data (counted in the collator the Trainer calls)."""
    from numlearn.data import collate
    from numlearn.training.run import train

    seen = {}
    real_call = collate.PadCollator.__call__

    def counting(self, batch):
        out = real_call(self, batch)
        key = seen.setdefault("cur", [0, 0])
        key[0] += sum(len(b["input_ids"]) for b in batch)
        key[1] += out["input_ids"].numel()
        return out

    monkeypatch.setattr(collate.PadCollator, "__call__", counting)
    shares = {}
    for sampling in ("random", "group_by_length"):
        seen["cur"] = [0, 0]
        run_dir = train(_cfg(tmp_path, "loss=mle", f"train.sampling={sampling}", "train.max_steps=12",
                             f"run_dir={tmp_path}/{sampling}"))
        assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
        real, padded = seen["cur"]
        shares[sampling] = 1 - real / padded
    assert shares["group_by_length"] < 0.5 * shares["random"], shares


@pytest.mark.parametrize("accum", [1, 2])
def test_fused_linear_loss_trains_to_the_same_parameters(tmp_path, accum):
    """train.fused_linear_loss=true (loss from hidden states, logits never formed) through the real
    Trainer: a few steps of the tiny model (tied embeddings) end at the same parameters as the
    logits path, and the logged CE and numeric term agree."""
    from transformers import AutoModelForCausalLM

    from numlearn.training.run import train

    runs = {}
    for fused in (False, True):
        runs[fused] = train(_cfg(tmp_path, "loss=del", "loss.alpha=0.8", f"train.fused_linear_loss={fused}",
                                 "train.loss_chunk_size=37", f"train.gradient_accumulation_steps={accum}",
                                 f"run_dir={tmp_path}/fused_{fused}"))
    a, b = (AutoModelForCausalLM.from_pretrained(runs[f] / "final") for f in (False, True))
    assert a.config.tie_word_embeddings
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pb, pa, rtol=1e-4, atol=1e-5, msg=name)
    la = [m for m in _metrics(runs[False]) if "loss" in m]
    lb = [m for m in _metrics(runs[True]) if "loss" in m]
    for x, y in zip(la, lb):
        for k in ("loss/ce", "loss/aux", "train/digit_acc"):
            assert y[k] == pytest.approx(x[k], rel=1e-4, abs=1e-6), k
    assert la and la[-1]["loss/aux"] > 0


def test_fused_linear_loss_refuses_what_it_cannot_do(tmp_path):
    from numlearn.training.run import check_run_options

    with pytest.raises(ValueError, match="works on full logits only"):
        check_run_options(_cfg(tmp_path, "loss=emo", "train.fused_linear_loss=true"))
    with pytest.raises(ValueError, match="FSDP1"):
        check_run_options(_cfg(tmp_path, "loss=del", "loss.alpha=1", "train.fused_linear_loss=true",
                               "train.fsdp=true", "train.fsdp_config.version=1"))
    with pytest.raises(ValueError, match="choose true, false or auto"):
        check_run_options(_cfg(tmp_path, "loss=del", "loss.alpha=1", "train.fused_linear_loss=yes"))
    check_run_options(_cfg(tmp_path, "loss=del", "loss.alpha=1", "train.fused_linear_loss=true", "train.fsdp=true"))
    check_run_options(_cfg(tmp_path, "loss=mixce", "train.fused_linear_loss=true"))  # MixCE has a linear form


@pytest.mark.parametrize("loss, fused", [("del", True), ("mle", True), ("emo", False), ("mixce", True)])
def test_paper_presets_fuse_the_head_for_every_loss_with_a_linear_form(loss, fused):
    from numlearn.training.run import check_run_options, uses_fused_linear_loss

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=["experiment=ablation_qwen2.5-1.5b", f"loss={loss}"])
    assert cfg.train.fused_linear_loss == "auto" and cfg.train.fsdp is True
    check_run_options(cfg)  # the ablation's EMO row is not refused: auto leaves it on the logits (MixCE is fused)
    assert uses_fused_linear_loss(cfg) is fused


def test_same_command_same_weights(tmp_path):
    """The embedded default's promise ("same command, same numbers" on one machine type): two runs
    of one config, in different directories with fresh caches, end at bit-identical weights."""
    from safetensors.torch import load_file

    from numlearn.training.run import train

    finals = []
    for i in range(2):
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            cfg = compose("config", overrides=[*SMALL, "loss=del", "loss.alpha=1.28", "train.torch_threads=1",
                                               f"paths.output_dir={tmp_path}/out{i}", f"paths.cache_dir={tmp_path}/cache{i}"])
        finals.append(load_file(train(cfg) / "final" / "model.safetensors"))
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


def test_resume_skips_a_checkpoint_whose_save_was_interrupted(tmp_path):
    from numlearn.training.run import last_complete_checkpoint

    ckpts = tmp_path / "checkpoints"
    assert last_complete_checkpoint(ckpts) is None
    for step, complete in ((250, True), (500, True), (750, False)):
        d = ckpts / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x")
        if complete:
            (d / "trainer_state.json").write_text("{}")
    (ckpts / "checkpoint-tmp").mkdir()
    assert last_complete_checkpoint(ckpts) == str(ckpts / "checkpoint-500")  # not 750, killed mid-save


def test_logged_ce_and_numeric_term_are_the_steps_with_accumulation(tmp_path):
    """Each micro-batch's loss is its share of the step's (normalised by the step's totals): the logged
    loss/ce and loss/aux must be summed over the step's micro-batches, not averaged (which under GA 32
    logged 1/32 of the CE)."""
    from numlearn.training.run import train

    run_dir = train(_cfg(tmp_path, "loss=del", "loss.alpha=0.8", "train.gradient_accumulation_steps=3",
                         "train.per_device_train_batch_size=2"))
    logs = [m for m in _metrics(run_dir) if "loss" in m]
    assert logs
    for m in logs:
        assert m["loss"] == pytest.approx(m["loss/ce"] + m["loss/aux"], rel=1e-3)
        assert m["train/step_digits"] > 0


# Qwen2.5: "<s>" and "<unk>" are already ordinary tokens of its BPE vocabulary (ids 128245, 128244),
# so adding them as bos / unk adds no row -- checked with the official script's own transformers
# 4.57.1 and its slow Qwen2Tokenizer (add_special_tokens returned 0, len 151,665). The official
# embedding therefore has 151,665 rows, the checkpoint's 271 padding rows dropped; not 151,667, as
# issue 25 counted. The code decides.
@pytest.mark.parametrize("twin,base,added,n_new,rows", [
    ("qwen2.5", 151_665, {"bos_token": "<s>", "unk_token": "<unk>"}, 0, 151_936),  # a checkpoint with padded rows
    ("llama2-spm", 32_000, {"pad_token": "[PAD]"}, 1, 32_000),
])
def test_vocab_setup_official_is_the_del_scripts_resize(shared_tokenizers, tmp_path, twin, base, added, n_new, rows):
    """model.vocab_setup=official: the tokens smart_tokenizer_and_embedding_resize adds (pad / eos /
    bos / unk the tokenizer lacks), embeddings resized to len(tokenizer) (Qwen2.5's padding rows
    dropped), each new row the mean of the rows before it; the default keeps the checkpoint's rows
    and pads with eos."""
    from omegaconf import OmegaConf
    from transformers import AutoConfig, AutoModelForCausalLM

    from numlearn.training.model import build_model, build_tokenizer

    ckpt = tmp_path / "ckpt"
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(
        "qwen2", vocab_size=rows, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=False)).save_pretrained(ckpt)
    orig = AutoModelForCausalLM.from_pretrained(ckpt)

    def build(vocab_setup):
        cfg = OmegaConf.create({"source": "pretrained", "name_or_path": str(ckpt), "dtype": "float32",
                                "tokenizer": str(shared_tokenizers / twin), "vocab_setup": vocab_setup})
        tok = build_tokenizer(cfg, lambda: [], tmp_path / "cache", tmp_path)
        return tok, build_model(cfg, tok, tmp_path / "cache")

    tok, model = build("official")
    assert len(tok) == base + n_new and {k: getattr(tok, k) for k in added} == added
    if twin == "qwen2.5":
        assert (tok.bos_token_id, tok.unk_token_id) == (128245, 128244)
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert emb.shape[0] == head.shape[0] == base + n_new
    for new, old in ((emb, orig.get_input_embeddings().weight), (head, orig.get_output_embeddings().weight)):
        assert torch.equal(new[:base], old[:base])
        assert torch.allclose(new[base:], old[:base].mean(0, keepdim=True).expand(n_new, -1))
    tok, model = build(None)
    assert len(tok) == base and model.get_input_embeddings().weight.shape[0] == max(rows, base)
    assert tok.pad_token_id == tok.eos_token_id if "pad_token" in added else tok.pad_token_id is not None
    with pytest.raises(ValueError, match="vocab_setup"):
        build("authors")


def test_a_finished_run_is_not_silently_reused_for_another_recipe(tmp_path, caplog):
    """Issue 41: the same experiment/model/loss/alpha/seed with another training recipe used to print
    'already complete, skipping' and keep the old model. Now: the same recipe skips; another one is
    refused in one line naming the differing key and the override that gives it its own run dir."""
    from numlearn.training.run import train

    run = train(_cfg(tmp_path, "loss=mle"))
    weights = (run / "final" / "model.safetensors").read_bytes()
    with caplog.at_level("INFO", logger="numlearn.training.run"):
        assert train(_cfg(tmp_path, "loss=mle")) == run
    assert "already complete" in caplog.text
    with pytest.raises(ValueError) as e:
        train(_cfg(tmp_path, "loss=mle", "data.n_train=150"))
    msg = str(e.value)
    assert "data.n_train: 200 -> 150" in msg and "experiment_name=" in msg and "force=true" in msg
    assert 'through make: ARGS="--override experiment_name=<new name>"' in msg  # issue 66 item 2: passable there
    assert (run / "final" / "model.safetensors").read_bytes() == weights
    moved = train(_cfg(tmp_path, "loss=mle", "data.n_train=150", "experiment_name=other"))
    assert moved != run and (moved / "final").is_dir()


def test_one_training_per_run_dir_and_a_dead_holders_lock_is_taken_over(tmp_path):
    """Issue 41: three trainings of one run dir ran to the end together (26 duplicate step records).
    While one holds the run dir, a second stops in one line naming its pid; a lock left by a process
    that died is taken over (the kernel released it)."""
    import subprocess
    import sys

    from numlearn.rundirs import RunDirBusy, RunDirLock
    from numlearn.training.run import train

    cfg = _cfg(tmp_path, "loss=mle")
    run_dir = Path(cfg.run_dir)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom numlearn.rundirs import RunDirLock\n"
                               f"with RunDirLock({str(run_dir / 'train.lock')!r}, 'training', 'wait'):\n"
                               "    print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=f"another training \\(pid {holder.pid}\\)"):
            train(cfg)
        assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "final").exists()
    finally:
        holder.kill()
        holder.wait()
    with RunDirLock(run_dir / "train.lock", "training", "wait"):  # the dead holder's lock: taken over
        pass
    assert (train(cfg) / "final").is_dir()


def test_a_run_shorter_than_logging_steps_still_logs_its_last_step(tmp_path, caplog):
    """Issue 47: 3 steps with logging every 50 used to log nothing; the last step is always logged (and a
    run of 5 with logging every 2 logs steps 2, 4 and 5)."""
    from numlearn.training.run import train

    with caplog.at_level("INFO", logger="numlearn.train"):
        run = train(_cfg(tmp_path, "loss=mle", "train.max_steps=3", "train.logging_steps=50"))
    assert [m["step"] for m in _metrics(run) if "loss" in m] == [3]
    assert any(r.getMessage().startswith("step 3/3 loss=") for r in caplog.records)
    run = train(_cfg(tmp_path, "loss=mle", "train.max_steps=5", "train.logging_steps=2", "experiment_name=five"))
    assert [m["step"] for m in _metrics(run) if "loss" in m] == [2, 4, 5]


def test_evaluation_logs_into_the_trainings_wandb_run(tmp_path, monkeypatch):
    """Issue 47: evaluation results reach W&B, in the training's own run (resumed by the id run.json records),
    beside its curves; a run trained without W&B logs nothing."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    import wandb
    from wandb.sdk.wandb_run import Run

    from numlearn.evaluate import evaluate as run_evaluation  # the command's work: the recipe, then W&B
    from numlearn.training.run import train

    logged, real_log = [], Run.log
    monkeypatch.setattr(Run, "log", lambda self, d, *a, **k: logged.append((self.id, dict(d))) or real_log(self, d, *a, **k))
    over = ("logger=wandb", "loss=del", "train.max_steps=2")
    run_dir = train(_cfg(tmp_path, *over))
    ref = json.loads((run_dir / "run.json").read_text())["wandb"]
    assert ref["id"] and ref["mode"] == "offline"
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("evaluate", overrides=[*SMALL, f"paths.output_dir={tmp_path}/out", f"paths.cache_dir={tmp_path.parent}/cache",
                                             *over, "eval.benchmarks.synthetic_test.generator.n=3",
                                             "eval.benchmarks.synthetic_ood.generator.n=2", "eval.max_new_tokens_cap=4",
                                             "eval.modes=[cot]"])
    logged.clear()
    run_evaluation(cfg)
    evals = {k: v for rid, d in logged if rid == ref["id"] for k, v in d.items()}
    assert "eval/synthetic_test/cot/accuracy" in evals and "eval/teacher_forced/digit_acc" in evals
    assert wandb.run is None
    logged.clear()
    plain = train(_cfg(tmp_path, "loss=mle", "train.max_steps=2"))
    assert "wandb" not in json.loads((plain / "run.json").read_text())


def test_the_recipe_plans_without_weights_then_fits_its_plan(tmp_path, monkeypatch):
    """TrainRecipe.plan() decides the run once (the loss, its effective weight, the fused path, the
    templates) and loads no weight; record() is run.json's content; fit() trains that plan and nothing else
    (the plan is not re-derived from the config after it was made)."""
    import numlearn.training.hf_trainer as hf_mod
    import numlearn.training.model as model_mod
    from numlearn.training.run import RunPlan, TrainRecipe

    recipe = TrainRecipe(_cfg(tmp_path, "loss=del", "loss.alpha=0.5", "train.gradient_accumulation_steps=2",
                              "train.fused_linear_loss=true"))
    built = []
    real_build = model_mod.build_model
    monkeypatch.setattr(model_mod, "build_model", lambda *a, **k: built.append(1) or real_build(*a, **k))
    bridges, real_bridge = [], hf_mod.LossBridge
    monkeypatch.setattr(hf_mod, "LossBridge", lambda *a, **k: bridges.append(k["fused_linear"]) or real_bridge(*a, **k))
    plan = recipe.plan()
    assert isinstance(plan, RunPlan) and recipe.plan() is plan and not built
    assert plan.fused_linear and plan.grad_accum == 2 and plan.world_size == 1
    assert plan.effective_weight == pytest.approx(0.5) and plan.templates[0]["rank"] == 0
    assert not plan.run_dir.exists()  # nothing written by planning
    record = recipe.record("dry_run")
    assert record["fused_linear_loss"] is True and record["aux_effective_weight"] == plan.effective_weight
    assert record["grad_accum"] == 2 and record["run_dir"] == str(plan.run_dir)
    plan.fused_linear = False  # fit() runs the plan it holds: this decision, not the config's, is what trains
    run_dir = recipe.fit()
    meta = json.loads((run_dir / "run.json").read_text())
    assert built == [1] and bridges == [False]  # one model, and the loss on the full logits, as planned
    assert meta["status"] == "complete" and meta["fused_linear_loss"] is False
    assert {k: meta[k] for k in ("aux_effective_weight", "grad_accum", "templates", "recipe_sha")} == \
        {k: record[k] for k in ("aux_effective_weight", "grad_accum", "templates", "recipe_sha")}


def test_resuming_a_tied_head_warns_of_no_missing_key_but_other_keys_still_warn(caplog):
    """Issue 66 item 5: every resume of a tied-head model said "There were missing keys in the checkpoint
    model loaded: ['lm_head.weight']". The head is the embedding: tied again, nothing said; a real missing key
    still warns."""
    import logging

    from torch.nn.modules.module import _IncompatibleKeys
    from transformers import AutoConfig, AutoModelForCausalLM

    from numlearn.training.hf_trainer import NumlearnTrainer

    cfg = AutoConfig.for_model("qwen2", vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    from transformers.utils import logging as hf_logging

    hf_logging.enable_propagation()  # transformers' loggers do not reach the root logger by default
    t = object.__new__(NumlearnTrainer)  # the method alone, on a model (no data, no arguments)
    t.model = AutoModelForCausalLM.from_config(cfg)
    assert t.tied_head_keys() == {"lm_head.weight"}
    with caplog.at_level(logging.WARNING):
        t._issue_warnings_after_load(_IncompatibleKeys(missing_keys=["lm_head.weight"], unexpected_keys=[]))
    assert "missing keys" not in caplog.text
    with caplog.at_level(logging.WARNING):
        t._issue_warnings_after_load(_IncompatibleKeys(missing_keys=["lm_head.weight", "model.norm.weight"],
                                                       unexpected_keys=[]))
    assert "missing keys in the checkpoint model loaded: ['model.norm.weight']" in caplog.text
    untied = object.__new__(NumlearnTrainer)
    untied.model = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        "qwen2", vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, tie_word_embeddings=False))
    assert untied.tied_head_keys() == set()
    hf_logging.disable_propagation()
