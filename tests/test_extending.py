"""docs/extending.md, carried out: in a temporary copy of conf/, a toy loss, a toy JSONL benchmark and a toy
model preset are added as the page says, and train -> evaluate -> aggregate runs on them; the study recipe
runs the pipeline on a toy preset. A recipe that stops working turns this red."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "extending.md").read_text()


def _yaml_block(after: str) -> str:
    """The first ```yaml block of docs/extending.md after the heading ``after``."""
    section = DOC.split(after, 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)


def _python_block(after: str) -> str:
    section = DOC.split(after, 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


TOY_RECORDS = [{"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
                "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"} for a, b in
               ((3, 4), (12, 5), (7, 30), (21, 21))]


@pytest.fixture
def toy_tree(tmp_path, monkeypatch):
    """conf/ copied, the page's toy loss, benchmark and model preset added; a data root with the toy file."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "loss" / "toy.yaml").write_text(_yaml_block("## A loss"))
    (conf / "eval" / "benchmark" / "toy.yaml").write_text(_yaml_block("## A benchmark"))
    (conf / "model" / "toy_tiny.yaml").write_text(_yaml_block("## A model preset"))
    # an eval preset that lists it (the page: "- benchmark@benchmarks.toy: toy" in its defaults)
    (conf / "eval" / "toy.yaml").write_text(
        "defaults:\n  - _schema\n  - benchmark@benchmarks.toy: toy\n  - _self_\nmodes: [cot]\nlimit: 2\n"
        "max_new_tokens_cap: 8\nteacher_forced:\n  source: file\n  file: benchmarks/toy/toy.jsonl\n  n: 4\n")
    data = tmp_path / "data" / "benchmarks" / "toy"
    data.mkdir(parents=True)
    (data / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TOY_RECORDS))
    env = {"NUMLEARN_CONF_DIR": str(conf), "NUMLEARN_DATA_DIR": str(tmp_path / "data"),
           "NUMLEARN_OUTPUT_DIR": str(tmp_path / "out")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return tmp_path, env


@pytest.fixture
def toy_loss(monkeypatch):
    """The page's ToyLoss, registered as the page registers it (undone after the test)."""
    from numlearn.losses import registry

    monkeypatch.setattr(registry, "LOSSES", dict(registry.LOSSES))
    ns: dict = {}
    exec(_python_block("## A loss"), ns)  # noqa: S102 - the documented recipe itself
    return ns["ToyLoss"]


def test_the_toy_loss_is_what_the_page_says(toy_loss):
    from numlearn.losses import DigitTargets, build_loss, capabilities

    loss = build_loss("toy", _digit_vocab(), alpha=0.5)
    zd = torch.tensor([[2.0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0.0] * 10])
    dt = DigitTargets(rows=torch.tensor([0, 1]), values=torch.tensor([0, 3]), del_weight=torch.ones(2),
                      int_place=torch.zeros(2, dtype=torch.long))
    p0 = torch.exp(torch.tensor(2.0)) / (torch.exp(torch.tensor(2.0)) + 9)
    assert loss.digit_term(zd, dt).tolist() == pytest.approx([1 - float(p0), 0.9])  # by hand
    caps = capabilities("toy")
    assert caps.linear_form and caps.numeric_term and caps.needs_digit_vocab
    with pytest.raises(ValueError, match="already registered"):
        from numlearn.losses import DELLoss, register_loss

        register_loss("toy", DELLoss)


def _digit_vocab():
    from numlearn.losses import DigitVocab

    return DigitVocab(tuple(range(10, 20)), 20)


def test_train_evaluate_aggregate_on_the_toy_loss_benchmark_and_model(toy_tree, toy_loss, cli):
    tmp, env = toy_tree
    common = ["model=toy_tiny", "loss=toy", "train=smoke", "train.max_steps=2", "data.n_train=64",
              f"paths.cache_dir={tmp / 'cache'}"]
    r = cli("numlearn.train", common)
    assert r.returncode == 0, r.stderr[-2000:]
    run = tmp / "out" / "default" / "toy_tiny" / "toy" / "alpha=0.5" / "seed=0"
    meta = json.loads((run / "run.json").read_text())
    assert meta["loss"] == "toy" and meta["alpha"] == 0.5 and meta["model"] == "toy_tiny"
    r = cli("numlearn.evaluate", [*common, "eval=toy"])
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads((run / "eval" / "toy" / "cot" / "result.json").read_text())
    assert result["metrics"]["n"] == 2 and result["teacher_forced"]["n_examples"] == 4
    from numlearn.reporting import aggregate

    assert aggregate.main([str(run), "--out", str(tmp / "tables")]) == 0
    table = (tmp / "tables" / "table1.md").read_text()
    assert "toy (cot)" in table and re.search(r"^\| toy_tiny \| toy \| 1 \|", table, flags=re.M), table


def test_a_local_benchmark_needs_only_its_file(toy_tree):
    from numlearn.evaluation.benchmarks import load_benchmark
    from numlearn.schema import load_benchmark_config

    tmp, _ = toy_tree
    problems, info = load_benchmark(load_benchmark_config(tmp / "conf" / "eval" / "benchmark" / "toy.yaml"),
                                    tmp / "data", tmp / "cache")
    assert [p.answer for p in problems] == ["7", "17", "37", "42"] and info["sha256"]


@pytest.mark.distributed  # jobs as processes, ~1 min: the multi-process tier (make test-distributed, CI)
def test_the_study_recipe_runs_the_pipeline_and_a_rerun_trains_nothing(toy_tree, capsys, monkeypatch):
    """The page's study command on a toy preset (built-in losses: the pipeline's jobs are new processes)."""
    tmp, env = toy_tree
    (tmp / "conf" / "experiment" / "toy_study.yaml").write_text(
        "# @package _global_\n# python -m numlearn.pipeline table1 --experiment toy_study ...\n"
        "defaults:\n  - override /model: toy_tiny\n  - override /train: smoke\n  - override /eval: toy\n"
        "experiment_name: toy_study\ndata:\n  n_train: 64\ntrain:\n  max_steps: 2\n"
        f"paths:\n  cache_dir: {tmp / 'cache'}\n")
    (tmp / "conf" / "study" / "toy_study.yaml").write_text(_yaml_block("## A study"))
    cmd = DOC.split("## A study", 1)[1].split("```bash\n", 1)[1].split("```")[0].strip()
    argv = cmd.split()[3:]  # after "python -m numlearn.pipeline"
    argv = [a.replace("results/", f"{tmp}/results/") for a in argv]
    monkeypatch.chdir(tmp)  # the study's out (results/toy_study) is relative: under tmp
    from numlearn import pipeline

    assert pipeline.main([*argv, "--outputs", str(tmp / "out"), "--jobs", "2", "--live", "off"]) == 0
    table = (tmp / "results" / "toy_study" / "table1.md").read_text()
    assert re.search(r"^\| toy_tiny \| mle \| 2 \|", table, flags=re.M), table
    assert re.search(r"^\| toy_tiny \| del \| 2 \|", table, flags=re.M), table
    capsys.readouterr()
    assert pipeline.main([*argv, "--outputs", str(tmp / "out"), "--reuse", "--live", "off"]) == 0
    err = capsys.readouterr().err
    assert err.count("every seed has stored results (--reuse): nothing to run") == 2, err
