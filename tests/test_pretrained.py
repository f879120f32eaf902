"""A pretrained start (issue 27): the long3 task variant, base-task replay, fine-tuning from a stored
run (model.source=run) with the base's provenance, and the pipeline that trains missing bases first."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from numlearn import pipeline
from numlearn.data import synthetic
from numlearn.data.sources import DataError, synthetic_records

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SMALL = ["model.config.hidden_size=32", "model.config.intermediate_size=64", "model.config.num_hidden_layers=2",
         "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2", "model.vocab_size=300",
         "data.n_train=200", "train=smoke"]


def _sha(problems) -> str:
    return hashlib.sha256("".join(json.dumps(asdict(p), sort_keys=True, ensure_ascii=False) + "\n"
                                  for p in problems).encode()).hexdigest()


# -- the task variant -----------------------------------------------------------------------------
def test_the_base_task_is_byte_for_byte_what_it_was():
    """Adding variants must not move one byte of the base task (Table 1's data and its stored results):
    these digests are of the splits written before variants existed (commit bf69299)."""
    assert _sha(synthetic.generate("train", 300, 0)) == "22ab1b0a3fa8827c090585a01102d2ff9ccf7cb740377ab7b87138c832816260"
    assert _sha(synthetic.generate("val", 50, 0)) == "360beb6576c2a1d14c1e3b63b4c46f1dbf129db1fa6a3c528317d828bdf3c769"
    assert _sha(synthetic.generate("test", 200, 0)) == "3df1cadae280862584159ecce44ab9ba46b9b8b1dc4d0cdc2b3cbee083160060"
    assert _sha(synthetic.generate("test_ood", 50, 0)) == \
        "4f11974e7a20d3de2658b65125f5e0ce2a0d38d2760a1a230adc297061c874b6"


def _ints(text: str) -> list[str]:
    return re.findall(r"(?<![\d.])\d+(?![\d.])", text)


def test_long3_has_three_digit_operands_and_disjoint_splits():
    train = synthetic.generate("train", 400, 0, variant="long3")
    val, test = synthetic.generate("val", 100, 0, variant="long3"), synthetic.generate("test", 100, 0, variant="long3")
    assert {p.key for p in train}.isdisjoint({p.key for p in test} | {p.key for p in val})
    assert {p.key for p in val}.isdisjoint({p.key for p in test})
    for p in train:  # every integer operand has 3 digits; money has 2 integer digits
        if p.template in ("total", "chain"):
            a, b, *_ = _ints(p.question)
            assert len(a) == 3 and (p.template == "chain" or len(b) == 3), p.question
        elif p.template == "price":
            money = re.findall(r"\$(\d+)\.\d\d", p.question)
            assert len(money) == 2 and all(len(m) == 2 for m in money), p.question
    base = synthetic.generate("train", 400, 0)
    assert {p.key for p in train}.isdisjoint({p.key for p in base})
    assert synthetic.generate("test", 100, 0, variant="long3") == test  # deterministic


def test_a_variant_has_no_ood_split_and_an_unknown_one_is_named(tmp_path):
    with pytest.raises(ValueError, match="no test_ood split"):
        synthetic.generate("test_ood", 5, 0, variant="long3")
    with pytest.raises(ValueError, match=r"unknown synthetic difficulty 'long9'.*long3"):
        synthetic.ensure_synthetic(tmp_path, 5, 0, 0, difficulty="long9")
    with pytest.raises(ValueError, match="no test_ood split"):
        synthetic.ensure_synthetic(tmp_path, 0, 0, 5, difficulty="long3")
    paths = synthetic.ensure_synthetic(tmp_path, 0, 7, 0, difficulty="long3")
    assert paths["test"].parent.parent.name == "long3" and len(paths["test"].read_text().splitlines()) == 7
    assert paths["test"].parent.parent != synthetic.ensure_synthetic(tmp_path, 0, 7, 0)["test"].parent.parent


def test_replay_spreads_the_base_task_evenly_among_the_variant(tmp_path):
    """4 variant problems at 1/8, 3/8, 5/8, 7/8 and 2 base problems at 1/4, 3/4: v0 b0 v1 v2 b1 v3."""
    recs = synthetic_records(tmp_path, 4, 0, pot=False, difficulty="long3", replay=2)
    variant = [r["instruction"] for r in synthetic_records(tmp_path, 4, 0, pot=False, difficulty="long3")]
    base = [p.question for p in synthetic.generate("train", 2, 0)]
    assert [r["instruction"] for r in recs] == [variant[0], base[0], variant[1], variant[2], base[1], variant[3]]
    with_pot = synthetic_records(tmp_path, 4, 0, pot=0.5, difficulty="long3", replay=2)
    assert len(with_pot) == 4 + 2 + 3  # a PoT example for every other problem, replayed ones included
    with pytest.raises(DataError, match="without data.difficulty"):
        synthetic_records(tmp_path, 4, 0, replay=2)
    from omegaconf import OmegaConf

    from numlearn.data.sources import load_source

    with pytest.raises(DataError, match="options of the synthetic task, not of source='local'"):
        load_source(OmegaConf.create({"source": "local", "files": [], "difficulty": "long3"}), tmp_path, tmp_path)


# -- fine-tuning from a stored run ----------------------------------------------------------------
def _cfg(tmp_path, *overrides):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose("config", overrides=[f"paths.output_dir={tmp_path}/out", f"paths.cache_dir={tmp_path}/cache",
                                            *overrides])


def _base_and_finetune(tmp_path, *finetune):
    from numlearn.training.run import train

    base_run = train(_cfg(tmp_path, *SMALL, "experiment_name=table1_tiny", "seed=1"))
    ft = train(_cfg(tmp_path, "experiment=pretrained_tiny", "train=smoke", "data.n_train=40", "data.replay=8",
                    "seed=1", *finetune))
    return base_run, ft


def test_missing_base_is_one_error_naming_the_command(tmp_path):
    from numlearn.training.model import BaseModelMissing
    from numlearn.training.run import plan_run

    with pytest.raises(BaseModelMissing, match=r"python -m numlearn.train experiment=table1_tiny loss=mle seed=3 "):
        plan_run(_cfg(tmp_path, "experiment=pretrained_tiny", "seed=3"))
    run = tmp_path / "out" / "table1_tiny" / "tiny" / "mle" / "alpha=0.0" / "seed=3"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    (run / "run.json").write_text(json.dumps({"status": "running"}))
    with pytest.raises(BaseModelMissing, match="did not finish"):
        plan_run(_cfg(tmp_path, "experiment=pretrained_tiny", "seed=3"))


def test_a_finetune_starts_from_its_seeds_base_and_records_which(tmp_path):
    """learning_rate=0: the fine-tune's final weights are the base's, bit for bit (a run that built a
    fresh model, or loaded another seed's base, ends elsewhere); its tokenizer is the base's; run.json
    and the result summary name the base and the sha256 of the weights it started from."""
    from safetensors.torch import load_file

    from numlearn.records import RunRecord
    from numlearn.training.run import weights_sha256

    base, ft = _base_and_finetune(tmp_path, "train.learning_rate=0.0", "train.max_steps=2")
    a, b = load_file(base / "final" / "model.safetensors"), load_file(ft / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    from transformers import AutoTokenizer

    tb, tf = AutoTokenizer.from_pretrained(base / "final"), AutoTokenizer.from_pretrained(ft / "final")
    assert tb.get_vocab() == tf.get_vocab() and len(tb) < 400  # the base's small vocabulary, not a new one
    text = synthetic.generate("test", 1, 0, variant="long3")[0].cot
    assert tb(text)["input_ids"] == tf(text)["input_ids"]
    rec = RunRecord.read(ft / "run.json")
    assert ft.as_posix().endswith("pretrained_tiny/tiny_base/mle/alpha=0.0/seed=1")
    b_rec = RunRecord.read(base / "run.json")
    assert rec.extra["base"] == {"run_dir": str(base), "recipe_sha": b_rec.recipe_sha, "git": b_rec.git,
                                 "weights_sha256": weights_sha256(base / "final")}
    assert rec.summary()["base"]["weights_sha256"] == hashlib.sha256(
        b"model.safetensors\0" + (base / "final" / "model.safetensors").read_bytes()).hexdigest()
    assert rec.recipe["data"]["difficulty"] == "long3" and rec.recipe["model"]["base"]["run"].startswith("table1_tiny")
    assert rec.extra["data"]["examples"] == 40 + 8 + 12  # 48 problems, a quarter of them also as PoT


def test_a_finetune_moves_the_base_weights_on_the_target_task(tmp_path):
    from safetensors.torch import load_file

    base, ft = _base_and_finetune(tmp_path, "train.max_steps=3")
    a, b = load_file(base / "final" / "model.safetensors"), load_file(ft / "final" / "model.safetensors")
    assert any(not torch.equal(a[k], b[k]) for k in a)
    # the cached training split it read is the long3 variant's, and the base task's replayed problems
    gen = tmp_path / "cache" / "synthetic" / synthetic.generator_key()
    assert (gen / "long3" / "seed=0" / "train-40.jsonl").is_file() and (gen / "seed=0" / "train-8.jsonl").is_file()


def test_the_teacher_forced_solutions_follow_the_training_task(tmp_path):
    from omegaconf import OmegaConf

    from numlearn.evaluation.teacher_forced import teacher_forced_records

    tcfg = OmegaConf.create({"source": "synthetic", "n": 5})
    long3 = teacher_forced_records(tcfg, OmegaConf.create({"seed": 0, "difficulty": "long3"}), tmp_path, tmp_path)
    base = teacher_forced_records(tcfg, OmegaConf.create({"seed": 0}), tmp_path, tmp_path)
    assert [r["instruction"] for r in long3] == [p.question for p in synthetic.generate("test", 5, 0, variant="long3")]
    assert [r["instruction"] for r in base] == [p.question for p in synthetic.generate("test", 5, 0)]


# -- the pipeline -----------------------------------------------------------------------------------
def test_missing_bases_are_jobs_and_a_base_of_another_recipe_stops(tmp_path):
    out = tmp_path / "o"
    jobs = pipeline.base_jobs([0, 2], experiment="pretrained_tiny", outputs=out, say=lambda m: None)
    assert [j.name for j in jobs] == ["base seed=0", "base seed=2"]
    argv = jobs[1].steps[0][1]
    assert argv[1:] == ["-m", "numlearn.train", "experiment=table1_tiny", "loss=mle", "seed=2",
                        f"paths.output_dir={out}"]
    run = out / "table1_tiny" / "tiny" / "mle" / "alpha=0.0" / "seed=0"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=["experiment=table1_tiny", "loss=mle", "seed=0"])
    from numlearn.rundirs import training_recipe

    recipe = training_recipe(cfg)
    (run / "run.json").write_text(json.dumps({"status": "complete", "recipe": recipe}))
    assert [j.name for j in pipeline.base_jobs([0], experiment="pretrained_tiny", outputs=out,
                                               say=lambda m: None)] == []
    recipe["train"]["max_steps"] = 7
    (run / "run.json").write_text(json.dumps({"status": "complete", "recipe": recipe}))
    with pytest.raises(pipeline.PipelineError, match=r"another recipe.*train.max_steps: 7 -> 1000"):
        pipeline.base_jobs([0], experiment="pretrained_tiny", outputs=out, say=lambda m: None)


def test_the_pretrained_rows_are_mle_both_del_forms_and_the_sweeps_choices(tmp_path, monkeypatch):
    sel = tmp_path / "selected.json"
    sel.write_text(json.dumps({"del": {"alpha": 0.01}, "ntl": {"alpha": 0.1}, "dist2": {"alpha": 1.0}}))
    seen = {}

    def fake_plan_rows(rows, seeds, **kw):
        seen["rows"], seen["experiment"] = [r.label for r in rows], kw["experiment"]
        return []

    monkeypatch.setattr(pipeline, "base_jobs", lambda *a, **k: [])
    monkeypatch.setattr(pipeline, "plan_rows", fake_plan_rows)
    monkeypatch.setattr(pipeline, "build_tables", lambda *a, **k: seen.setdefault("primary", k["report"].primary_benchmark) and 0)
    assert pipeline.main(["pretrained", "--seeds", "2", "--selected", str(sel), "--out", str(tmp_path / "t")]) == 0
    assert seen == {"rows": ["mle", "del", "del_paper", "del:0.01", "ntl:0.1", "dist2:1.0"],
                    "experiment": "pretrained_tiny", "primary": "synthetic_long3_test"}


def test_the_robustness_primaries_follow_the_target_task():
    from numlearn.reporting.robustness import DEFAULT_PRIMARY, primary_metrics

    assert primary_metrics() == DEFAULT_PRIMARY
    assert primary_metrics("synthetic_long3_test")[:2] == (("accuracy", "synthetic_long3_test (cot)", True),
                                                           ("distance", "synthetic_long3_test (cot)", False))
    assert primary_metrics("synthetic_long3_test")[2:] == DEFAULT_PRIMARY[2:]


@pytest.mark.long
def test_pretrained_end_to_end_on_a_shrunken_rehearsal(tmp_path):
    """python -m numlearn.pipeline pretrained (make pretrained-tiny), shrunk: the base trained first,
    then MLE and DEL fine-tune it and are evaluated on the long3 and base test splits; the table reads
    the store; a second --reuse run trains nothing."""
    shrink = ["train.max_steps=2", "data.n_train=48", "data.replay=8", "eval.teacher_forced.n=4", "eval.limit=2"]
    argv = ["pretrained", "--seeds", "1", "--rows", "mle,del", "--jobs", "2", "--live", "off",
            "--store", str(tmp_path / "store"), "--outputs", str(tmp_path / "out"), "--out", str(tmp_path / "tab"),
            *(x for o in shrink for x in ("--override", o)),
            *(x for o in ("train.max_steps=2", "data.n_train=48") for x in ("--base-override", o))]
    r = subprocess.run([sys.executable, "-m", "numlearn.pipeline", *argv], cwd=REPO, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[base seed=0]" in r.stderr and "trained first" in r.stderr
    assert (tmp_path / "out" / "table1_tiny" / "tiny" / "mle" / "alpha=0.0" / "seed=0" / "final").is_dir()
    stored = {p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store").rglob("result.json")}
    want = {f"pretrained_tiny/tiny_base/{loss}/alpha={a}/seed=0/eval/{b}/{m}/result.json"
            for loss, a in (("mle", "0.0"), ("del", "1.28")) for b in ("synthetic_long3_test", "synthetic_test")
            for m in ("cot", "pot")}
    assert want <= stored and not any(s.startswith("table1_tiny") for s in stored)  # bases are not published
    res = json.loads((tmp_path / "store" / sorted(want)[0]).read_text())
    assert res["run"]["base"]["run_dir"].endswith("table1_tiny/tiny/mle/alpha=0.0/seed=0")
    table = (tmp_path / "tab" / "table1.md").read_text()
    assert "| tiny_base | del | 1 |" in table and "synthetic_long3_test" in table
    again = subprocess.run([sys.executable, "-m", "numlearn.pipeline", *argv, "--reuse"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    # nothing left to train: the bases are not even looked at (a complete store needs none of them)
    assert again.stderr.count("nothing to run") == 2 and "[base seed" not in again.stderr


# -- a real model on 2 cores: frozen lower layers, and what a run costs ------------------------------
def test_trainable_layers_trains_only_the_top_layers(tmp_path):
    """train.trainable_layers=1 on a 2-layer model: after training the lower layer and the (tied)
    embeddings are the initial ones bit for bit, the top layer and the final norm moved."""
    from safetensors.torch import load_file

    from numlearn.training.run import train

    run = train(_cfg(tmp_path, *SMALL, "train.trainable_layers=1", "train.max_steps=3"))
    init = train(_cfg(tmp_path, *SMALL, "train.learning_rate=0.0", "train.max_steps=1", "experiment_name=init"))
    a, b = load_file(init / "final" / "model.safetensors"), load_file(run / "final" / "model.safetensors")
    frozen = [k for k in a if ".layers.0." in k or "embed_tokens" in k]
    moved = [k for k in a if ".layers.1." in k or k == "model.norm.weight"]
    assert frozen and moved
    assert all(torch.equal(a[k], b[k]) for k in frozen)
    assert all(not torch.equal(a[k], b[k]) for k in moved if "bias" not in k)
    meta = json.loads((run / "run.json").read_text())
    assert meta["frozen"]["trainable_layers"] == 1 and meta["frozen"]["of_layers"] == 2
    with pytest.raises(ValueError, match=r"trainable_layers=3: the model has 2 decoder layers"):
        train(_cfg(tmp_path, *SMALL, "train.trainable_layers=3", "experiment_name=bad"))


def test_the_cost_projection_is_steps_times_seconds_plus_problems_times_seconds():
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        import smollm2_cost
    finally:
        sys.path.pop(0)
    m = {"top": 6, "eval_fixed_s": 30.0,
         "train": {"all": {"s_per_step": 6.0, "startup_s": 12.0}, "6": {"s_per_step": 3.0, "startup_s": 6.0}},
         "generation": {"synthetic_test": {"s_per_problem": 2.0}, "gsm8k": {"s_per_problem": 4.0},
                        "svamp": {"s_per_problem": 2.0}}}
    rows = {(r["steps"], r["layers"], r["problems"]): r for r in smollm2_cost.project(m)}
    r = rows[(200, "top 6", 50)]  # (6 + 200 x 3) s + (30 + 50 x 8) s = 606 + 430 s = 17.3 min
    assert (r["train_min"], r["eval_min"], r["run_min"], r["fits"]) == (10.1, 7.2, 17.3, True)
    assert rows[(200, "all", 200)]["fits"] is False and rows[(200, "top 6", 50)]["study_h"] == round(9 * 17.27 / 60, 1)


def test_selected_none_adds_no_chosen_weights(tmp_path, monkeypatch):
    """make smollm2-rows passes --selected none: its rows only, none labelled val-chosen."""
    seen = {}
    monkeypatch.setattr(pipeline, "plan_rows", lambda rows, seeds, **kw: seen.setdefault("rows", [r.label for r in rows])
                        and [])
    monkeypatch.setattr(pipeline, "build_tables", lambda *a, **k: seen.setdefault("selected", k["selected"]) or 0)
    assert pipeline.main(["table1", "--experiment", "smollm2_synthetic", "--rows", "mle,del", "--selected", "none",
                          "--seeds", "1", "--out", str(tmp_path)]) == 0
    assert seen == {"rows": ["mle", "del"], "selected": None}
    assert pipeline.selected_rows(None) == []


def test_the_mechanism_script_reads_the_presets_heldout_solutions(tmp_path, capsys):
    """experiments/del_mechanism.py measures on the records a preset's result files use
    (eval.teacher_forced): pretrained_tiny's are the long3 test split (the pretrained start's task),
    table1_tiny's the base task's; the variant's training-set size is the preset's data.n_train, not
    a number of the script's; a --difficulty the preset does not train on is refused."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("del_mech", Path(__file__).resolve().parents[1] / "experiments"
                                                  / "del_mechanism.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    long3, cfg = mod.heldout_records("pretrained_tiny", 3, cache=tmp_path)
    base, t1 = mod.heldout_records("table1_tiny", 3, cache=tmp_path)
    assert [r["instruction"] for r in long3] == [p.question for p in synthetic.generate("test", 3, 0, variant="long3")]
    assert [r["output"] for r in base] == [p.cot for p in synthetic.generate("test", 3, 0)]
    assert long3 != base
    assert (cfg.data.difficulty, int(cfg.data.n_train), int(t1.data.n_train)) == ("long3", 5000, 20000)
    smol, scfg = mod.heldout_records("smollm2_synthetic", cache=tmp_path)  # n: the preset's own (its result files')
    assert len(smol) == int(scfg.eval.teacher_forced.n) == 100
    # the variant's training data: three-digit operands carry more place weight per digit than the base task's
    w = mod.data_place_weights(tmp_path / "none", n_synthetic=300, difficulty="long3", n_variant=300, cache=tmp_path)
    assert set(w) == {"synthetic (train, CoT)", "synthetic long3 (train, CoT)"}
    assert w["synthetic long3 (train, CoT)"]["mean_place_weight"] > w["synthetic (train, CoT)"]["mean_place_weight"]
    assert mod.main(["--experiment", "table1_tiny", "--difficulty", "long3", "--out", str(tmp_path / "o"),
                     "--cache", str(tmp_path)]) == 2
    assert "data.difficulty=None" in capsys.readouterr().err


def test_preset_config_composes_without_generating_data(tmp_path):
    """numlearn.cli.preset_config reads a preset's settings (what del_mechanism needs of Table 1's: data.n_train)
    and writes nothing: preset_records, by contrast, builds the held-out split from the composed config."""
    from numlearn.cli import preset_config
    from numlearn.evaluation.teacher_forced import preset_records

    t1 = preset_config("table1_tiny", [f"paths.cache_dir={tmp_path}"])
    train = preset_config("smollm2_synthetic", [f"paths.cache_dir={tmp_path}"], config="config")
    assert (int(t1.data.n_train), int(train.data.n_train), float(train.train.learning_rate)) == (20000, 2000, 2e-4)
    assert list(tmp_path.iterdir()) == []
    assert len(preset_records(preset_config("table1_tiny", [f"paths.cache_dir={tmp_path}",
                                                           "eval.teacher_forced.n=2"]))) == 2
    assert list(tmp_path.iterdir())


def test_check_bases_says_whether_a_base_is_table_1s_model(tmp_path, capsys):
    """experiments/check_bases.py: a base whose held-out metrics equal the stored Table 1 result passes;
    the same store with one metric moved by 1e-4 (another model) fails, naming the seed."""
    import importlib.util

    from numlearn.training.run import train

    spec = importlib.util.spec_from_file_location("check_bases", Path(__file__).resolve().parents[1] / "experiments"
                                                  / "check_bases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = train(_cfg(tmp_path, *SMALL, "experiment_name=table1_tiny", "seed=1"))
    records = [{"instruction": p.question, "output": p.cot} for p in synthetic.generate("test", 200, 0)]
    held = mod.base_heldout(tmp_path / "out", 1, records)
    assert 0 < held["digit_acc"] <= 1 and held["ce"] > 0
    result = tmp_path / "runs" / mod.BASE_RUN / "seed=1" / "eval" / "synthetic_test" / "cot" / "result.json"
    result.parent.mkdir(parents=True)
    argv = ["--seeds", "1-1", "--outputs", str(tmp_path / "out"), "--store", str(tmp_path / "runs"),
            "--cache", str(tmp_path / "cache")]
    result.write_text(json.dumps({"run": {"heldout": held}}))
    assert mod.main(argv) == 0 and "| 1 |" in capsys.readouterr().out
    result.write_text(json.dumps({"run": {"heldout": {**held, "digit_nll": held["digit_nll"] + 1e-4}}}))
    assert mod.main(argv) == 1 and "seeds [1] differ" in capsys.readouterr().err
    assert base.name == "seed=1"
    with pytest.raises(FileNotFoundError, match="no stored Table 1 MLE result for seed 2"):
        mod.stored_heldout(tmp_path / "runs", 2)
