"""Issue 58: every stored number is what its inputs say. A value outside its schema's range is one line before
anything is written (every entry point alike); a diverging step stops the run, never stored as complete; a
changed input is a new run or a refusal; verdicts are recomputed from the benchmark, never trusted; a result
whose numbers do not add up is refused by the aggregator."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from numlearn.schema import LossConfig, Range, check_ranges, range_problems

CONF = Path(__file__).resolve().parents[1] / "conf"


def _compose(overrides, name="evaluate"):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(name, overrides=overrides)


# -- 1. ranges in the schema ---------------------------------------------------------------------------------
def test_a_range_says_what_it_admits_by_hand():
    r = Range(lo=0, hi=1, lo_open=True)
    assert r.problem(0.5) is None and r.problem(1) is None
    assert r.problem(0) == "a finite number > 0 and <= 1"
    assert r.problem(float("nan")) and r.problem(float("inf")) and r.problem(True)  # a bool is no number
    assert r.problem(None) and r.problem(None, nullable=True) is None
    assert Range(lo=1, integer=True).problem(1.5) == "an integer >= 1"
    assert Range(lo=1, integer=True, also=("auto",)).problem("auto") is None
    alpha = LossConfig.__dataclass_fields__["alpha"].metadata["range"]
    assert alpha.problem(0.0) is None and alpha.problem(-0.1) and alpha.problem(float("nan"))


# every preset the repository ships composes inside its ranges (a range too tight would refuse a real run)
@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_shipped_preset_is_inside_its_ranges(experiment):
    assert range_problems(_compose([f"experiment={experiment}"])) == []


@pytest.mark.parametrize("group", ["loss", "model", "data", "eval", "train"])
def test_every_group_preset_is_inside_its_ranges(group):
    for p in sorted((CONF / group).glob("*.yaml")):
        assert range_problems(_compose([f"{group}={p.stem}"])) == [], p


@pytest.mark.parametrize("override, key", [
    ("loss.alpha=nan", "loss.alpha"), ("loss.alpha=inf", "loss.alpha"), ("loss.alpha=-1", "loss.alpha"),
    ("train.num_train_epochs=-1", "train.num_train_epochs"), ("train.learning_rate=-1", "train.learning_rate"),
    ("seed=1.5", "seed"), ("seed=-1", "seed"), ("eval.batch_size=-2", "eval.batch_size"),
    ("eval.pot_timeout_s=1e12", "eval.pot_timeout_s"), ("eval.program_workers=0", "eval.program_workers"),
    ("eval.program_workers=-3", "eval.program_workers"), ("eval.max_new_tokens_cap=0", "eval.max_new_tokens_cap"),
    ("data.n_train=-10", "data.n_train"), ("model.config.hidden_size=-1", "model.config.hidden_size"),
    ("eval.teacher_forced.n=0", "eval.teacher_forced.n"), ("train.warmup_ratio=2", "train.warmup_ratio"),
])
def test_out_of_range_values_are_refused_in_one_line_before_anything_is_written(cli, tmp_path, override, key):
    extra = ["loss=del"] if override.startswith("loss.") else []
    if override.startswith("eval.teacher_forced"):
        extra = ["eval=smollm2_gsm8k"]
    for module in ("numlearn.train", "numlearn.evaluate"):
        r = cli(module, [*extra, override, f"paths.output_dir={tmp_path}/out"])
        assert r.returncode != 0 and len(r.lines) == 1, r.stderr
        assert r.lines[0].startswith(f"{module}: error: {key}=") and "must be" in r.lines[0], r.lines
        assert not (tmp_path / "out").exists()  # nothing written, no run dir named alpha=nan or seed=1.5


def test_a_sweep_with_one_bad_value_is_refused_before_its_first_job(cli, tmp_path):
    r = cli("numlearn.train", ["-m", "loss=del", "loss.alpha=1.28,nan", f"paths.output_dir={tmp_path}/out"])
    assert r.returncode != 0 and "loss.alpha=nan: must be a finite number >= 0" in r.lines[-1]
    assert not (tmp_path / "out").exists()


def test_a_library_caller_gets_the_same_refusal():
    from numlearn.training.run import TrainRecipe

    cfg = _compose(["loss=del"], "config")
    OmegaConf.update(cfg, "loss.alpha", float("nan"))
    with pytest.raises(ValueError, match=r"loss.alpha=nan: must be a finite number >= 0"):
        TrainRecipe(cfg).plan()
    with pytest.raises(ValueError, match=r"seed=2.5"):
        check_ranges(OmegaConf.merge(cfg, {"seed": 2.5, "loss": {"alpha": 1.0}}))


@pytest.mark.parametrize("argv, says", [
    (["table1", "--seeds", "-3", "--plan"], "seed -3 is negative"),
    (["table1", "--jobs", "0", "--plan"], "--jobs: '0': give an integer >= 1"),
    (["table1", "--rows", "del:nan", "--plan"], "alpha 'nan' must be a finite number >= 0"),
    (["table1", "--rows", "del:-1", "--plan"], "alpha '-1' must be a finite number >= 0"),
    (["sweep", "--grid", "del=0.1,inf"], "alpha 'inf' must be a finite number >= 0"),
    (["table1", "--override", "train.learning_rate=nan", "--plan"], "train.learning_rate=nan: must be"),
])
def test_the_pipeline_refuses_bad_seeds_jobs_weights_and_overrides(cli, argv, says):
    r = cli("numlearn.pipeline", argv)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert "GPU-hours" not in r.stdout  # refused before any plan is printed


# -- 1. a diverging step stops the run -------------------------------------------------------------------------
SHORT = ["train.max_steps=6", "train.save_steps=2", "data.n_train=64", "train.per_device_train_batch_size=8",
         "eval.benchmarks.synthetic_test.generator.n=4"]


def test_a_diverging_learning_rate_stops_the_run_and_marks_nothing_complete(cli, tmp_path):
    from numlearn.records import RunRecord
    from numlearn.rundirs import run_is_complete

    out = tmp_path / "out"
    r = cli("numlearn.train", [*SHORT, "train.learning_rate=1e12", f"paths.output_dir={out}"])
    assert r.returncode != 0 and len(r.lines) >= 1
    assert "not finite" in r.lines[-1] and "step " in r.lines[-1] and "learning_rate" in r.lines[-1], r.lines
    run_dir = next(out.rglob("run.json")).parent
    assert not run_is_complete(run_dir) and not (run_dir / "final").exists()
    rec = RunRecord.of_run_dir(run_dir)
    assert rec.status == "failed" and "not finite" in rec.extra["failure"]
    # the same command again stops again: a failed run is never read as complete
    assert cli("numlearn.train", [*SHORT, "train.learning_rate=1e12", f"paths.output_dir={out}"]).returncode != 0


def test_the_step_guard_reads_a_nan_loss_and_a_nan_gradient_norm():
    import torch

    from numlearn.training.hf_trainer import NonFiniteStep, NumlearnTrainer

    class Probe(NumlearnTrainer):  # the guard alone, on a stand-in state (no model, no data)
        def __init__(self):
            self.state = type("S", (), {"global_step": 4})()
            self.args = type("A", (), {"learning_rate": 1e-3})()
            self._step_finite = None

    t = Probe()
    base = NumlearnTrainer.__mro__[1]
    orig = base._get_grad_norm
    try:
        base._get_grad_norm = lambda self, model, grad_norm=None: grad_norm
        assert t._get_grad_norm(None, torch.tensor(2.0)) == torch.tensor(2.0)
        with pytest.raises(NonFiniteStep, match=r"step 5: the training gradient norm is not finite"):
            t._get_grad_norm(None, torch.tensor(float("inf")))
        t._step_finite = torch.tensor(False)
        with pytest.raises(NonFiniteStep, match=r"step 5: the training loss is not finite"):
            t._get_grad_norm(None, torch.tensor(1.0))
        assert t._step_finite is None  # reset for the next step
    finally:
        base._get_grad_norm = orig


# -- 2. no stale data ------------------------------------------------------------------------------------------
def test_a_changed_local_training_file_is_refused_not_reused(cli, tmp_path, data_dir):
    src = data_dir / "train" / "gsm8k" / "train.jsonl"
    if not src.exists():
        pytest.skip("GSM8K train not found: run `make data`")
    f = tmp_path / "train.jsonl"
    f.write_text("".join(src.read_text().splitlines(keepends=True)[:24]))
    args = ["data=gsm8k", f"data.files=[{f}]", "train.max_steps=2", "train.per_device_train_batch_size=4",
            f"paths.output_dir={tmp_path}/out"]
    assert cli("numlearn.train", args).returncode == 0
    run_json = json.loads(next((tmp_path / "out").rglob("run.json")).read_text())
    assert run_json["inputs"]["data_files"][str(f)] == __import__("hashlib").sha256(f.read_bytes()).hexdigest()
    again = cli("numlearn.train", args)
    assert again.returncode == 0 and "already complete" in again.stdout + again.stderr
    f.write_text(f.read_text().replace("Natalia", "Nataly"))  # the same path, other content
    r = cli("numlearn.train", args)
    assert r.returncode != 0 and "trained on other data" in r.lines[-1] and str(f) in r.lines[-1], r.lines


def test_input_differences_compares_what_both_sides_recorded():
    from numlearn.rundirs import input_differences

    now = {"data_files": {"a.jsonl": "1" * 64}, "records_sha256": "2" * 64}
    assert input_differences({}, now) == []  # a run from before inputs were hashed: nothing to compare
    assert input_differences(now, now) == []
    changed = input_differences({"data_files": {"a.jsonl": "3" * 64}, "records_sha256": "2" * 64}, now)
    assert changed == ["data file a.jsonl: sha256 333333333333 -> 111111111111"]


# -- 3. verdicts recomputed, never trusted ---------------------------------------------------------------------
def _evaluated(tmp_path, saved_tiny_model):
    from numlearn.evaluation.recipe import run_evaluation

    cfg = _compose([f"model_path={saved_tiny_model}", f"eval_dir={tmp_path}/eval", f"paths.cache_dir={tmp_path}/cache",
                    "eval.benchmarks.synthetic_test.generator.n=5", "eval.benchmarks.synthetic_ood.generator.n=2",
                    "eval.max_new_tokens_cap=6", "eval.modes=[cot]"])
    return cfg, run_evaluation(cfg)


def _rewrite(path: Path, edit) -> None:
    """Edit each line and recompute the (keyless) hash chain, as a forger can."""
    from numlearn.evaluation.runner import chain_seed, line_digest

    res = json.loads(path.with_name("result.json").read_text())
    head = chain_seed(res["generation"]["chain"]["run_key"])
    lines = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        edit(r)
        r["chain"] = head = line_digest(head, r)
        lines.append(json.dumps(r))
    path.write_text("\n".join(lines) + "\n")
    res["generation"]["chain"]["head"] = head
    path.with_name("result.json").write_text(json.dumps(res))


def test_score_check_refuses_a_forged_ground_truth_even_with_the_chain_recomputed(saved_tiny_model, tmp_path):
    from numlearn.evaluation.score import main as score_main

    _, files = _evaluated(tmp_path, saved_tiny_model)
    gens = next(f for f in files if "synthetic_test" in str(f)).with_name("generations.jsonl")
    assert score_main([str(gens), "--check"]) == 0

    def forge(r):  # the truth set to the model's own answer, the flag to true
        r["gt_raw"], r["gt"], r["correct"] = r["pred"] or "7", r["pred"] or "7", True

    _rewrite(gens, forge)
    res = json.loads(gens.with_name("result.json").read_text())
    res["metrics"]["accuracy"] = 1.0
    res["correct_by_id"] = {k: True for k in res["correct_by_id"]}
    gens.with_name("result.json").write_text(json.dumps(res))
    assert score_main([str(gens), "--check"]) == 1


def test_resume_recomputes_verdicts_against_the_benchmarks_current_answers(tmp_path, caplog):
    from numlearn.evaluation.backends.base import SamplingConfig
    from numlearn.evaluation.benchmarks import Problem
    from numlearn.evaluation.runner import evaluate_problems, read_jsonl

    class Answer4:
        name, calls = "scripted", 0

        def generate(self, prompts, sampling):
            self.calls += 1
            return ["The answer is 4."] * len(prompts)

    sampling = SamplingConfig(max_new_tokens=8)
    out = tmp_path / "g.jsonl"
    old = [Problem(str(i), f"q{i}", "4", "4") for i in range(3)]
    evaluate_problems(old, Answer4(), "svamp", "cot", sampling, out)
    assert [r["correct"] for r in read_jsonl(out)[0]] == [True] * 3
    new = [Problem("0", "q0", "5", "5"), *old[1:]]  # the benchmark's answer to problem 0 changed
    b = Answer4()
    info = evaluate_problems(new, b, "svamp", "cot", sampling, out)
    recs = {r["id"]: r for r in read_jsonl(out)[0]}
    assert b.calls == 0 and info["n_resumed"] == 3  # the completions are kept ...
    assert recs["0"]["gt_raw"] == "5" and recs["0"]["correct"] is False  # ... and the verdict recomputed
    assert "verdicts are recomputed" in caplog.text


# -- 3. the aggregator recomputes what it tables ---------------------------------------------------------------
def _store_copy(tmp_path) -> Path:
    root = Path(__file__).resolve().parents[1] / "results" / "runs" / "table1_tiny" / "tiny" / "mle" / "alpha=0.0"
    dst = tmp_path / "store" / "table1_tiny" / "tiny" / "mle" / "alpha=0.0"
    for seed in ("seed=0", "seed=1"):
        shutil.copytree(root / seed, dst / seed)
    return tmp_path / "store"


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["metrics"].update(accuracy=1.7), "not a proportion"),
    (lambda d: d["metrics"].update(accuracy=float("nan")), "not a proportion"),
    (lambda d: d["metrics"].update(n=d["metrics"]["n"] + 1), "per-problem verdicts"),
    (lambda d: d["metrics"].update(accuracy=min(1.0, d["metrics"]["accuracy"] + 0.05)), "not the mean of its"),
    (lambda d: d["run"].update(alpha=float("nan")), "not a finite weight"),
])
def test_the_aggregator_refuses_a_result_whose_numbers_do_not_add_up(tmp_path, edit, says):
    from numlearn.reporting.collect import BadResultFile, load_results

    store = _store_copy(tmp_path)
    assert len(load_results([store])) > 0
    f = next(store.rglob("synthetic_test/cot/result.json"))
    d = json.loads(f.read_text())
    edit(d)
    f.write_text(json.dumps(d))
    with pytest.raises(BadResultFile, match=says):
        load_results([store])


def test_the_aggregator_refuses_one_seeds_result_copied_over_anothers(tmp_path):
    from numlearn.reporting.collect import BadResultFile, load_results

    store = _store_copy(tmp_path)
    runs = store / "table1_tiny" / "tiny" / "mle" / "alpha=0.0"
    rel = Path("eval") / "synthetic_test" / "cot" / "result.json"
    shutil.copy(runs / "seed=0" / rel, runs / "seed=1" / rel)  # the table would silently have one seed fewer
    with pytest.raises(BadResultFile, match=r"sits under seed=1 but records seed 0"):
        load_results([store])


# -- 7. tracebacks to one line ----------------------------------------------------------------------------------
@pytest.mark.parametrize("module, args, says", [
    ("numlearn.train", ["paths.output_dir=/proc/numlearn-x"], "cannot create the run dir /proc/numlearn-x"),
    ("numlearn.train", ["run_dir=/dev/null/x"], "/dev/null is not a directory"),
    ("numlearn.evaluate", ["paths.output_dir=/proc/numlearn-x"], "cannot create the eval dir /proc/numlearn-x"),
])
def test_an_output_that_cannot_be_created_is_one_line(cli, module, args, says):
    r = cli(module, args)
    assert r.returncode != 0 and len(r.lines) == 1 and says in r.lines[0], r.stderr


def test_a_model_dir_with_an_invalid_config_json_is_one_line(cli, tmp_path):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    r = cli("numlearn.evaluate", [f"model_path={bad}", f"paths.output_dir={tmp_path}/out"])
    assert r.returncode != 0 and r.lines[-1].endswith("is not a valid JSON object: the model directory is damaged or "
                                                      "not a Hugging Face model; copy or save the model again"), r.stderr
    assert "Traceback" not in r.stderr


def test_a_directory_given_as_a_data_file_is_a_data_error(tmp_path):
    from numlearn.data.sources import DataError, read_records

    (tmp_path / "train.jsonl").write_text('{"instruction": "q", "output": "a"}\n')
    with pytest.raises(DataError, match=r"is a directory, not a data file: name the JSONL / JSON file inside it"):
        read_records(tmp_path)


def test_jsonl_with_unicode_line_separators_inside_strings_is_read(tmp_path):
    from numlearn.data.sources import read_records

    f = tmp_path / "d.jsonl"
    recs = [{"instruction": "a\u2028b\x85c\x1cd", "output": "The answer is 1."}, {"instruction": "x", "output": "y"}]
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in recs), encoding="utf-8")
    assert read_records(f) == recs


# -- 8. portable records ------------------------------------------------------------------------------------------
def test_no_committed_result_names_a_machines_absolute_path():
    """Every committed text file under results/ names what it read relative to the repository (or by hash / hub
    id): no /work/, /root/ or /home/ path, nothing portable_text would still rewrite."""
    import re

    from numlearn.records import portable_text

    root = Path(__file__).resolve().parents[1] / "results"
    machine = re.compile(r"(?<![\w.:/])/(work|root|home)/")
    bad = []
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix in (".json", ".md", ".csv", ".txt", ".jsonl"):
            text = f.read_text(encoding="utf-8")
            if machine.search(text) or portable_text(text) != text:
                bad.append(str(f.relative_to(root)))
    assert not bad, f"{len(bad)} file(s) with absolute paths, e.g. {bad[:3]}: python tools/portable_results.py"


def test_portable_text_by_hand():
    from numlearn.records import portable, portable_text

    assert portable_text("/w/x/outputs/e/tiny/mle/alpha=0.0/seed=0/final") == "outputs/e/tiny/mle/alpha=0.0/seed=0/final"
    assert portable_text("/w/shared/data/benchmarks/gsm8k/gsm8k.jsonl") == "data/benchmarks/gsm8k/gsm8k.jsonl"
    assert portable_text("/w/shared/data") == "data" and portable_text("/w/x/data_cache/s/a.jsonl") == "data_cache/s/a.jsonl"
    for keep in ("https://host/a/outputs/b", "/usr/bin/python3", "Qwen/Qwen2.5-1.5B", "/tmp/m/alpha-model"):
        assert portable_text(keep) == keep
    assert portable({"a": ["/w/outputs/x", 3], "b": "text /w/outputs/y"}) == {"a": ["outputs/x", 3], "b": "text /w/outputs/y"}


def test_a_result_is_written_portable(tmp_path):
    from numlearn.records import ResultRecord

    r = ResultRecord(benchmark={"name": "b", "file": "/w/shared/data/benchmarks/b.jsonl"}, mode="cot",
                     metrics={"accuracy": 0.5, "n": 2}, run={"run_dir": "/w/x/outputs/e/m/mle/alpha=0.0/seed=0"},
                     extra={"model_path": "/w/x/outputs/e/m/mle/alpha=0.0/seed=0/final"})
    r.write(tmp_path / "result.json")
    d = json.loads((tmp_path / "result.json").read_text())
    assert d["benchmark"]["file"] == "data/benchmarks/b.jsonl" and d["run"]["run_dir"].startswith("outputs/e/")
    assert d["model_path"] == "outputs/e/m/mle/alpha=0.0/seed=0/final"


def _result_with_recipe(out: Path, overrides: list[str], limit=None) -> Path:
    """A run dir under ``out`` holding one result file whose run recipe is table1_tiny's composed with
    ``overrides`` (what a rehearsal with --override trains) and whose evaluation had ``limit``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.cli import conf_dir

    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        cfg = compose("config", overrides=["experiment=table1_tiny", "loss=del", "seed=3", *overrides])
    recipe = OmegaConf.to_container(cfg, resolve=True)
    run = out / "table1_tiny" / "tiny" / "del" / "alpha=1.28" / "seed=3"
    d = run / "eval" / "synthetic_test" / "cot"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({
        "run": {"experiment": "table1_tiny", "loss": "del", "alpha": 1.28, "seed": 3, "recipe": recipe},
        "benchmark": {"name": "synthetic_test", "kind": "number"}, "mode": "cot", "config": {"eval": {"limit": limit}},
        "metrics": {"accuracy": 0.5, "n": 2}, "correct_by_id": {"0": 1, "1": 0}}))
    return run


@pytest.mark.parametrize("overrides,limit,says", [
    (["train.max_steps=20"], None, "train.max_steps: 1000 -> 20"),
    (["data.n_train=200"], None, "data.n_train"),
    ([], 10, "evaluated on 10 problems per benchmark, where its preset evaluates every problem"),
])
def test_a_shortened_run_is_refused_by_the_committed_store_only(tmp_path, capsys, overrides, limit, says):
    """Issue 66 item 3: `publish` once copied a 20-step run evaluated on 10 problems into results/runs ("6 new").
    Into a checkout's committed store (results/runs beside a .git) a recipe its preset does not have, or a
    problem subset, is refused in one line and nothing is copied; a store of one's own takes it; --any-recipe
    states the intent; a row's own variations (the loss, the seed, MLE's tuned learning rate) pass."""
    from numlearn.reporting.store import main as store_main

    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed, outputs = tmp_path / "repo" / "results" / "runs", tmp_path / "out"
    run = _result_with_recipe(outputs, overrides, limit)
    argv = ["publish", str(run), "--outputs", str(outputs)]
    assert store_main([*argv, "--store", str(committed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "--any-recipe" in err[0], err
    assert not committed.exists() or not any(committed.rglob("result.json"))
    assert store_main([*argv, "--store", str(tmp_path / "mine")]) == 0
    assert store_main([*argv, "--store", str(committed), "--any-recipe"]) == 0


def test_a_rows_own_variations_enter_the_committed_store(tmp_path, capsys):
    from numlearn.reporting.store import main as store_main

    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed, outputs = tmp_path / "repo" / "results" / "runs", tmp_path / "out"
    run = _result_with_recipe(outputs, ["loss.alpha=0.32", "train.learning_rate=0.006", "loss.tag=x"])
    assert store_main(["publish", str(run), "--outputs", str(outputs), "--store", str(committed)]) == 0
    assert "1 new" in capsys.readouterr().err


def test_a_declared_evaluation_subset_enters_the_committed_store_and_an_ad_hoc_one_does_not(tmp_path):
    """A study's selection split is a declared evaluation (conf/eval/qwen_coder_select.yaml: the first 40 problems
    of GSM8K-train), not a shortened run: its results enter the committed store, where the preset's own evaluation
    would be 100 problems. The same benchmark at a limit no conf/eval file declares (eval.limit=10) is refused."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.cli import conf_dir
    from numlearn.records import ResultRecord
    from numlearn.reporting.store import committed_store_problem

    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        cfg = compose("config", overrides=["experiment=qwen_coder_study", "loss=mle", "seed=0",
                                           "loss.tag=mle_lr1e-05", "train.learning_rate=1e-05"])
    recipe = OmegaConf.to_container(cfg, resolve=True)

    def result(limit):
        f = tmp_path / f"limit{limit}" / "result.json"
        f.parent.mkdir()
        f.write_text(json.dumps({
            "run": {"experiment": "qwen_coder_study", "loss": "mle", "alpha": 0.0, "seed": 0, "recipe": recipe},
            "benchmark": {"name": "gsm8k_train", "kind": "number"}, "mode": "cot", "config": {"eval": {"limit": limit}},
            "metrics": {"accuracy": 0.5, "n": 2}, "correct_by_id": {"0": 1, "1": 0}}))
        return ResultRecord.read(f)

    assert committed_store_problem(result(40)) is None
    why = committed_store_problem(result(10))
    assert why and "evaluated on 10 problems" in why and "no conf/eval file that holds gsm8k_train evaluates 10" in why
