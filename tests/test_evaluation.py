"""Benchmarks as data, the resumable runner, PoT with CoT backup, metrics, the HF backend and
the Hydra evaluator end to end on a locally saved tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from numlearn.data.sources import DataError
from numlearn.evaluation.backends.base import Backend, GreedyReuse, SamplingConfig, truncate_at_stop
from numlearn.evaluation.benchmarks import Problem, load_benchmark
from numlearn.evaluation.metrics import compute_metrics
from numlearn.evaluation.runner import evaluate_problems, read_jsonl

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SAMPLING = SamplingConfig(max_new_tokens=32, stop=("### Instruction:",))


class ScriptedBackend(Backend):
    """Answers from a function of the prompt; counts prompts; can fail after some calls."""

    name = "scripted"

    def __init__(self, fn, fail_after_calls=None):
        self.fn, self.calls, self.prompts, self.fail_after = fn, 0, [], fail_after_calls

    def generate(self, prompts, sampling):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.prompts += prompts
        return [self.fn(p) for p in prompts]


def _problems(n):
    return [Problem(str(i), f"What is {i} + {i}?", str(2 * i)) for i in range(n)]


def _pot_answer(prompt):
    i = int(prompt.split("What is ")[1].split(" ")[0])
    return f"a = {i}\nb = {i}\nprint(a + b)" if "program" in prompt else f"{i} + {i} = {2 * i}. The answer is {2 * i}."


def test_pot_completion_produces_the_right_answer(tmp_path):
    out = tmp_path / "g.jsonl"
    evaluate_problems(_problems(3), ScriptedBackend(_pot_answer), "svamp", "pot", SAMPLING, out)
    recs, _ = read_jsonl(out)
    assert [r["pred"] for r in recs] == ["0", "2", "4"] and all(r["correct"] for r in recs)
    assert all(r["mode"] == "pot" and r["program_ok"] for r in recs)


def test_paper_mode_falls_back_to_cot(tmp_path):
    def fn(prompt):
        i = int(prompt.split("What is ")[1].split(" ")[0])
        if "program" in prompt:
            return "print(undefined_name)" if i % 2 else "I cannot write code."
        return f"The answer is {2 * i}."
    out = tmp_path / "g.jsonl"
    evaluate_problems(_problems(4), ScriptedBackend(fn), "gsm8k", "paper", SAMPLING, out)
    recs, _ = read_jsonl(out)
    assert [r["mode"] for r in recs] == ["cot_backup"] * 4
    assert all(r["correct"] for r in recs)
    assert recs[1]["program_ok"] is False
    assert "NameError" in recs[1]["attempts"][0]["program"]["strict"]["error"]
    assert [a["kind"] for a in recs[0]["attempts"]] == ["pot", "cot"]


def test_modes_generate_a_shared_greedy_prompt_once(tmp_path):
    """``[cot, pot, paper]`` in one process: paper's PoT attempts are pot's prompts and its backups cot's, so the
    wrapped backend generates 8 distinct prompts for 4 problems (not 16), and paper's lines are what a fresh backend
    gives; a sampled (temperature > 0) request is generated again."""
    def fn(prompt):
        i = int(prompt.split("What is ")[1].split(" ")[0])
        return ("print(undefined_name)" if i % 2 else f"print({2 * i})") if "program" in prompt else f"The answer is {2 * i}."
    inner = ScriptedBackend(fn)
    reuse = GreedyReuse(inner)
    infos = {m: evaluate_problems(_problems(4), reuse, "gsm8k", m, SAMPLING, tmp_path / m / "g.jsonl")
             for m in ("cot", "pot", "paper")}
    assert len(inner.prompts) == len(set(inner.prompts)) == 8
    assert [infos[m].get("reused_completions") for m in ("cot", "pot", "paper")] == [0, 0, 6]  # 4 PoT + 2 backups
    fresh = tmp_path / "fresh.jsonl"
    evaluate_problems(_problems(4), ScriptedBackend(fn), "gsm8k", "paper", SAMPLING, fresh)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "chain"} for r in rows]  # noqa: E731
    assert strip(read_jsonl(tmp_path / "paper" / "g.jsonl")[0]) == strip(read_jsonl(fresh)[0])
    sampled = SamplingConfig(max_new_tokens=32, temperature=0.7)
    reuse.generate(["What is 1 + 1?"], sampled)
    reuse.generate(["What is 1 + 1?"], sampled)
    assert inner.prompts[-2:] == ["What is 1 + 1?"] * 2


def test_a_resumed_line_serves_the_other_modes(tmp_path):
    """A new process that resumes mode cot from its file remembers those completions: mode paper's CoT backups
    are not generated again, only its PoT attempts."""
    def fn(prompt):
        return "I cannot write code." if "program" in prompt else "The answer is 2."
    evaluate_problems(_problems(4), GreedyReuse(ScriptedBackend(fn)), "gsm8k", "cot", SAMPLING, tmp_path / "cot.jsonl")
    later = ScriptedBackend(fn)
    reuse = GreedyReuse(later)
    assert evaluate_problems(_problems(4), reuse, "gsm8k", "cot", SAMPLING, tmp_path / "cot.jsonl")["n_resumed"] == 4
    info = evaluate_problems(_problems(4), reuse, "gsm8k", "paper", SAMPLING, tmp_path / "paper.jsonl")
    assert info["n_backup_generations"] == 4 and info["reused_completions"] == 4
    assert len(later.prompts) == 4 and all("program" in p for p in later.prompts)


@pytest.mark.parametrize("requested, choice, open_set", [
    (["cot", "pot"], ["cot"], ["cot", "pot"]),
    (["pot"], ["cot"], ["pot"]),
    (["cot", "pot", "paper"], ["cot", "paper"], ["cot", "pot", "paper"]),
    (["paper"], ["paper"], ["paper"]),
])
def test_multiple_choice_has_no_pot_mode(requested, choice, open_set):
    from numlearn.evaluation.spec import as_spec

    assert as_spec("aqua").modes(requested) == choice and as_spec("gsm8k").modes(requested) == open_set


def test_multiple_choice_uses_primed_cot(tmp_path):
    be = ScriptedBackend(lambda p: "The answer is (C)")
    out = tmp_path / "g.jsonl"
    evaluate_problems([Problem("0", "Pick one\nAnswer Choices: (A) 1 (B) 2 (C) 3 (D) 4", "C")], be, "sat",
                      "paper", SAMPLING, out)
    assert be.prompts[0].endswith("### Response: Let's solve the multi-choice question step by step.\n")
    assert read_jsonl(out)[0][0]["correct"]


def test_interrupted_run_resumes_without_regenerating(tmp_path):
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(_pot_answer, fail_after_calls=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_problems(_problems(10), be, "svamp", "cot", SAMPLING, out, chunk_size=3)
    assert len(read_jsonl(out)[0]) == 6
    with open(out, "a") as f:
        f.write('{"id": "6", "pred"')  # a line cut by the interruption
    be2 = ScriptedBackend(_pot_answer)
    info = evaluate_problems(_problems(10), be2, "svamp", "cot", SAMPLING, out, chunk_size=3)
    assert info["n_resumed"] == 6 and info["n_dropped_lines"] == 1
    assert len(be2.prompts) == 4  # only the four unfinished problems were generated
    recs, bad = read_jsonl(out)
    assert bad == 0 and sorted(int(r["id"]) for r in recs) == list(range(10))


def test_metrics_by_hand():
    recs = [
        {"id": "a", "pred": "123", "gt": "123", "correct": True, "mode": "cot"},
        {"id": "b", "pred": "124", "gt": "123", "correct": False, "mode": "cot"},
        {"id": "c", "pred": "1.25", "gt": "1.5", "correct": False, "mode": "pot", "program_ok": True},
        {"id": "d", "pred": "", "gt": "7", "correct": False, "mode": "pot", "program_ok": False},
    ]
    m = compute_metrics(recs, "number")
    assert m["accuracy"] == 0.25 and m["n_empty_pred"] == 1 and m["n_program_failed"] == 1
    import math
    expected = (0 + abs(math.log(124 + 1e-8) - math.log(123 + 1e-8)) + abs(math.log(1.25 + 1e-8) - math.log(1.5 + 1e-8))) / 3
    assert m["numerical_distance"] == pytest.approx(expected)
    assert m["n_numeric"] == 3
    # units: a right, b wrong, c right ("1" vs "1"), d wrong -> 2/4; tens: a, b right of 2; hundreds 2/2
    assert m["digit_acc_int"] == {"0": 0.5, "1": 1.0, "2": 1.0}
    assert m["digit_acc_frac"] == {"1": 0.0}


def test_truncate_at_stop():
    assert truncate_at_stop("x = 1\n### Instruction: more", ("### Instruction:", "Problem:")) == "x = 1\n"


BENCHMARKS = {"gsm8k": 1319, "svamp": 1000, "simuleq": 514, "math": 5000, "aqua": 254, "sat": 220,
              "mmlu_mathematics": 974}


@pytest.mark.parametrize("name,n", sorted(BENCHMARKS.items()))
def test_seven_benchmarks_load_and_verify(data_dir, tmp_path, name, n):
    bcfg = OmegaConf.load(CONF / "eval" / "benchmark" / f"{name}.yaml")
    probs, info = load_benchmark(bcfg, data_dir, tmp_path)
    assert len(probs) == n and info["sha256"] == bcfg.sha256
    assert all(p.answer != "" for p in probs)
    if bcfg.answer == "choice":
        assert all(p.answer in "ABCDE" for p in probs) and "Answer Choices: (A)" in probs[0].question


def test_altered_or_missing_benchmark_file_is_a_clear_error(data_dir, tmp_path):
    bcfg = OmegaConf.load(CONF / "eval" / "benchmark" / "sat.yaml")
    root = tmp_path / "root"
    (root / "benchmarks" / "sat").mkdir(parents=True)
    with pytest.raises(DataError, match="not found.*make data"):
        load_benchmark(bcfg, root, tmp_path)
    shutil.copy(data_dir / bcfg.file, root / bcfg.file)
    with open(root / bcfg.file, "a") as f:
        f.write(" ")
    with pytest.raises(DataError, match="sha256.*re-fetch"):
        load_benchmark(bcfg, root, tmp_path)
    with pytest.raises(DataError, match="data root .* does not exist"):
        load_benchmark(bcfg, tmp_path / "nope", tmp_path)


def test_hf_backend_batched_equals_single_and_honours_stops(saved_tiny_model):
    from numlearn.evaluation.backends import get_backend

    prompts = ["### Instruction:\nWhat is 1 + 2?\n\n### Response:", "Hi", "A much longer prompt about 12 apples."]
    sp = SamplingConfig(max_new_tokens=12, stop=("e",))
    batched = get_backend("hf", str(saved_tiny_model), batch_size=3).generate(prompts, sp)
    single = get_backend("hf", str(saved_tiny_model), batch_size=1).generate(prompts, sp)
    assert batched == single
    assert all("e" not in c for c in batched)


def test_evaluate_end_to_end_and_scorer(saved_tiny_model, tmp_path):
    from numlearn.evaluate import run_evaluation
    from numlearn.evaluation.score import main as score_main

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("evaluate", overrides=[f"model_path={saved_tiny_model}", f"eval_dir={tmp_path}/eval",
                                             f"paths.cache_dir={tmp_path}/cache", "eval.benchmarks.synthetic_test.generator.n=6",
                                             "eval.benchmarks.synthetic_ood.generator.n=4", "eval.max_new_tokens_cap=8"])
    assert cfg.eval.torch_threads == 1  # the embedded default's JOBS evaluations at once each take one thread
    torch.set_num_threads(2)
    try:
        files = run_evaluation(cfg)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)
    assert len(files) == 4
    res = json.loads(files[0].read_text())
    assert res["environment"]["torch_threads"] == 1  # what generation ran with, recorded
    for key in ("metrics", "n", "benchmark", "backend", "sampling", "packages", "git", "config", "correct_by_id"):
        assert key in res
    assert res["sampling"]["temperature"] == 0.0 and res["benchmark"]["sha256"]
    # per-problem distance, what the seed-aware distance interval resamples: its scored mean is the metric
    assert res["distance_by_id"].keys() == res["correct_by_id"].keys()
    scored = [d for d in res["distance_by_id"].values() if d is not None]
    assert len(scored) == res["metrics"]["n_numeric"]
    if scored:
        assert sum(scored) / len(scored) == pytest.approx(res["metrics"]["numerical_distance"])
    gens = files[0].with_name("generations.jsonl")
    assert score_main([str(gens), "--check"]) == 0
    # re-running resumes: nothing is generated again
    files = run_evaluation(cfg)
    assert json.loads(files[0].read_text())["generation"]["n_resumed"] == 6


def test_a_new_benchmark_is_one_yaml(tmp_path):
    """A toy multiple-choice benchmark in an existing file format: a YAML node and a data file, no
    code. Its choice letters, trigger and loader reach extraction, prompting and scoring."""
    from numlearn.evaluation.spec import BenchmarkSpec

    data = tmp_path / "data" / "toy.json"
    data.parent.mkdir()
    data.write_text(json.dumps([{"question": "2 + 2?\nAnswer Choices: (P) 3 (Q) 4", "answer": "Q"},
                                {"question": "1 + 2?\nAnswer Choices: (P) 3 (Q) 4", "answer": "P"}]))
    bcfg = OmegaConf.create({"name": "toy", "file": "toy.json", "loader": "question_answer", "answer": "choice",
                             "choice_letters": "PQ", "triggers": ["=>"], "max_new_tokens": 8})
    spec = BenchmarkSpec.from_config(bcfg)
    probs, info = load_benchmark(bcfg, tmp_path / "data", tmp_path)
    assert info["kind"] == "choice" and info["spec"]["choice_letters"] == "PQ"
    be = ScriptedBackend(lambda p: "I pick => Q, not P" if "2 + 2" in p else "maybe P or Q")
    out = tmp_path / "g.jsonl"
    evaluate_problems(probs, be, spec, "paper", SAMPLING, out)
    recs, _ = read_jsonl(out)
    assert be.prompts[0].endswith("step by step.\n")  # a choice benchmark is primed
    assert [r["pred"] for r in recs] == ["Q", "Q"]  # its trigger "=>": first letter after it; else the last
    assert [r["correct"] for r in recs] == [True, False]
    with pytest.raises(ValueError, match="choice_letters"):
        BenchmarkSpec.from_config({**bcfg, "choice_letters": None})
    with pytest.raises(DataError, match="unknown loader 'csv'"):
        load_benchmark(OmegaConf.create({**bcfg, "loader": "csv"}), tmp_path / "data", tmp_path)


def test_resume_keeps_only_lines_of_the_same_model_sampling_and_prompt(tmp_path, capsys, caplog):
    out = tmp_path / "g.jsonl"
    a = ScriptedBackend(lambda p: "The answer is 1.")
    evaluate_problems(_problems(4), a, "svamp", "cot", SAMPLING, out, generation_key="model-A")
    b = ScriptedBackend(lambda p: "The answer is 2.")
    info = evaluate_problems(_problems(4), b, "svamp", "cot", SAMPLING, out, generation_key="model-B")
    recs, _ = read_jsonl(out)
    assert info["n_stale_lines"] == 4 and info["n_resumed"] == 0 and len(b.prompts) == 4
    assert [r["pred"] for r in recs] == ["2"] * 4  # nothing of model A is credited to model B
    assert "came from another model" in caplog.text
    c = ScriptedBackend(lambda p: "unused")
    info = evaluate_problems(_problems(4), c, "svamp", "cot", SAMPLING, out, generation_key="model-B")
    assert info["n_resumed"] == 4 and c.calls == 0  # the same key resumes everything


def test_a_last_line_without_newline_is_not_merged_with_the_next(tmp_path):
    out = tmp_path / "g.jsonl"
    evaluate_problems(_problems(3), ScriptedBackend(lambda p: "The answer is 0."), "svamp", "cot", SAMPLING, out)
    text = out.read_text()
    out.write_text(text.rstrip("\n"))  # a complete last line whose newline never reached the disk
    evaluate_problems(_problems(5), ScriptedBackend(lambda p: "The answer is 0."), "svamp", "cot", SAMPLING, out)
    recs, bad = read_jsonl(out)
    assert bad == 0 and sorted(r["id"] for r in recs) == ["0", "1", "2", "3", "4"]  # line "2" kept, not merged
    assert out.read_text().endswith("\n") and out.read_text().count("\n") == 5


def test_lines_that_are_not_objects_are_dropped_and_counted(tmp_path):
    out = tmp_path / "g.jsonl"
    out.write_text('5\n"text"\n[1]\n{"no_id": 1}\n')
    info = evaluate_problems(_problems(2), ScriptedBackend(lambda p: "The answer is 0."), "svamp", "cot", SAMPLING, out)
    assert info["n_dropped_lines"] == 4 and len(read_jsonl(out)[0]) == 2


@pytest.mark.parametrize("overrides, tp", [([], 4), (["eval.tensor_parallel_size=2"], 2)])
def test_paper_preset_engine_arguments_reach_vllm(monkeypatch, overrides, tp):
    """What the paper preset asks of vLLM is what vllm.LLM receives (TP > 1 cannot run on a CPU, so
    the engine is a recorder here; the real engine runs in `make test-vllm` / `make vllm-vs-hf`)."""
    import sys
    import types

    seen = {}

    class RecordingLLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)

    fake = types.ModuleType("vllm")
    fake.LLM, fake.__version__ = RecordingLLM, "recorder"
    monkeypatch.setitem(sys.modules, "vllm", fake)
    from numlearn.evaluate import backend_from_config

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("evaluate", overrides=["experiment=table1_qwen2.5-1.5b", "loss=del", *overrides])
    backend = backend_from_config(cfg.eval, "/models/qwen", seed=3)
    # the official run_open.py / run_choice.py: LLM(model, tensor_parallel_size=4, dtype="bfloat16")
    assert seen["tensor_parallel_size"] == tp and seen["dtype"] == "bfloat16"
    assert seen["model"] == "/models/qwen" and seen["seed"] == 3
    assert seen["max_model_len"] == cfg.eval.max_model_len and seen["generation_config"] == "vllm"
    assert backend.describe()["tensor_parallel_size"] == tp


def test_the_cli_logs_the_written_results_to_the_training_wandb_run(tmp_path, monkeypatch):
    """numlearn.evaluate logs what the recipe wrote, read back from the result files (the recipe itself knows
    nothing of W&B): eval/<benchmark>/<mode>/<metric> for each file and the teacher-forced metrics once."""
    from types import SimpleNamespace

    from numlearn import evaluate, records, tracking
    from numlearn.records import ResultRecord

    model = tmp_path / "run" / "final"
    paths = []
    for bench, mode, acc in (("svamp", "cot", 0.25), ("gsm8k", "pot", 0.5)):
        p = tmp_path / "eval" / bench / mode / "result.json"
        p.parent.mkdir(parents=True)
        ResultRecord(benchmark={"name": bench, "kind": "number"}, mode=mode, metrics={"accuracy": acc, "n": 4},
                     teacher_forced={"digit_acc": 0.75, "source": "gsm8k"}, extra={"model_path": str(model)}).write(p)
        paths.append(p)
    got = {}
    monkeypatch.setattr(records.RunRecord, "of_model", classmethod(
        lambda cls, m: SimpleNamespace(extra={"wandb": {"id": "run-1"}}) if str(m) == str(model) else None))
    monkeypatch.setattr(tracking, "log_evaluation", lambda ref, run_dir, metrics: got.update(ref=ref, metrics=metrics))
    monkeypatch.setenv("WANDB_MODE", "offline")
    evaluate._log_to_training_run(paths)
    assert got["ref"] == {"id": "run-1"}
    assert got["metrics"] == {"eval/svamp/cot/accuracy": 0.25, "eval/svamp/cot/n": 4.0, "eval/gsm8k/pot/accuracy": 0.5,
                              "eval/gsm8k/pot/n": 4.0, "eval/teacher_forced/digit_acc": 0.75}
    got.clear()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    evaluate._log_to_training_run(paths)
    assert not got


def test_a_dry_run_prints_the_evaluation_plan_and_loads_no_weights(saved_tiny_model, tmp_path, monkeypatch, caplog):
    """Issue 62 item 2: ``evaluate dry_run=true`` checks every input (data, sandbox, model dir) and says what it
    would run -- model, backend, protocol, each benchmark's modes, problems and token cap, what is already
    generated, the teacher-forced pass -- then stops before the backend loads a weight."""
    import logging

    from numlearn.evaluate import run_evaluation
    from numlearn.evaluation import recipe

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("evaluate", overrides=[f"model_path={saved_tiny_model}", f"eval_dir={tmp_path}/eval",
                                             f"paths.cache_dir={tmp_path}/cache", "eval.limit=3", "dry_run=true",
                                             "eval.max_new_tokens_cap=8"])
    monkeypatch.setattr(recipe, "backend_from_config", lambda *a, **k: pytest.fail("a dry run loaded the model"))
    monkeypatch.setattr(recipe, "_teacher_forced", lambda *a, **k: pytest.fail("a dry run ran the teacher-forced pass"))
    gen = tmp_path / "eval" / "synthetic_test" / "cot" / "generations.jsonl"
    gen.parent.mkdir(parents=True)
    gen.write_text(json.dumps({"id": "0", "fingerprint": "x"}) + "\n")  # one line there: it would be resumed
    with caplog.at_level(logging.INFO, logger="numlearn.evaluate"):
        assert run_evaluation(cfg) == []
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"dry run: {saved_tiny_model} -> {tmp_path}/eval" in text and "protocol strict" in text
    assert "synthetic_test/cot: 3 problems, up to 8 new tokens (1 already generated: resumed)" in text
    assert "synthetic_ood/pot: 3 problems, up to 8 new tokens" in text
    assert "teacher forced: 200 solutions (synthetic)" in text
    assert not list((tmp_path / "eval").rglob("result.json"))
