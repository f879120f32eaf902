"""The tuned study kind (numlearn.studies.tuned) and the Qwen2.5-Coder study it declares (conf/study/qwen_coder.yaml):
rows resolved from the selection's choices, the declared family's size, the declaration's commit in the header,
the weights pruned once published. Nothing here trains: the study itself runs outside CI (make qwen-coder-study)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from numlearn.planning import PipelineError, Request, Row, plan
from numlearn.reporting.robustness import metric_key, primary_metrics
from numlearn.studies.tuned import Choice, declaration_line, selection_rows, stamp

REPO = Path(__file__).resolve().parents[1]


def test_rows_take_the_choices_a_rate_a_weight_and_a_control_at_another_loss_weight():
    c = Choice(rates={"mle": 4e-5}, weights={"del_paper": 0.32}, default_lr=2e-5)
    assert c.row("mle@chosen") == Row("mle", None, ("loss.tag=mle_lr4e-05", "train.learning_rate=4e-05"))
    assert c.row("mle@chosen").tag == "mle_lr4e-05" and Row("del_paper", 0.32).tag == "del_paper"  # results' names
    assert Choice({"mle": 2e-5}, {}, 2e-5).row("mle@chosen") == Row("mle")  # the recipe's own rate: the plain row
    assert c.row("del_paper@chosen") == Row("del_paper", 0.32)
    assert c.row("del_ce@chosen:del_paper") == Row("del_ce", 0.32)  # the control at the paper form's weight
    assert c.row("del:1.28") == Row("del", 1.28)
    with pytest.raises(PipelineError, match="ntl has no chosen weight"):
        c.row("ntl@chosen")
    with pytest.raises(PipelineError, match="LOSS@chosen"):
        c.row("mle@best")


def test_primary_metrics_per_mode_then_the_held_out_metrics():
    got = primary_metrics("gsm8k", ("cot", "pot"))
    assert [(k, n) for k, n, _ in got] == [
        ("accuracy", "gsm8k (cot)"), ("distance", "gsm8k (cot)"), ("accuracy", "gsm8k (pot)"),
        ("distance", "gsm8k (pot)"), ("heldout", "digit_acc"), ("heldout", "digit_nll")]
    assert [n for _, n, _ in primary_metrics("synthetic_test")][:2] == ["synthetic_test (cot)"] * 2
    with pytest.raises(ValueError, match="primary modes cto"):
        primary_metrics("gsm8k", ("cto",))


def test_the_qwen_coder_study_tests_the_family_its_power_statement_assumed():
    """The declaration's power statement was computed for a family of 12; the family the report Holm-adjusts over is
    (rows but the baseline) x (primary metrics whose key is declared): they must be the same number."""
    from numlearn.pipeline import study

    cfg = study("qwen_coder")
    assert cfg.kind == "tuned" and cfg.rows[0] == "mle@chosen"  # the first row is the rate-tuned baseline
    per_row = [m for m in primary_metrics(cfg.primary_benchmark, tuple(cfg.primary_modes))
               if metric_key(m[0], m[1]) in cfg.family_metrics]
    (declared,) = re.findall(r"--family (\d+)", cfg.declaration)
    assert (len(cfg.rows) - 1) * len(per_row) == int(declared) == 12
    # the same number of configurations for the tuned baseline as for the tuned numeric loss
    assert {k: len(v) for k, v in cfg.rates.items()} == {"mle": 3} and {k: len(v) for k, v in cfg.grid.items()} == \
        {"del_paper": 3}
    assert not set(cfg.selection_seeds) & set(range(1, 6)) and cfg.seeds == "1-5"
    assert cfg.exclude == ["gsm8k_train"] and "gsm8k_train" in cfg.select_on


def test_selection_jobs_evaluate_only_the_selection_split_and_prune_after_publishing(tmp_path):
    from numlearn.pipeline import study

    cfg = study("qwen_coder")
    rates, weights = selection_rows(cfg, 2e-5)
    assert [r.label for r in rates["mle"]][1] == "mle" and [r.alpha for r in weights] == [0.08, 0.32, 1.28]
    rows = [*rates["mle"], *weights]
    jobs = plan([Request(tuple(rows), (0,), tuple(cfg.evaluate))], experiment=str(cfg.experiment),
                store=tmp_path / "store", outputs=tmp_path / "out", reuse=False, say=lambda m: None, prune=True)
    assert len(jobs) == 6
    for j in jobs:
        assert [s[0] for s in j.steps] == ["train", "evaluate qwen_coder_select", "publish", "prune"]
        assert j.steps[1][1][-1] == "eval=qwen_coder_select"
    kept = plan([Request((Row("mle"),), (1,))], experiment=str(cfg.experiment), store=tmp_path / "store",
                outputs=tmp_path / "out", reuse=False, say=lambda m: None)
    assert [s[0] for s in kept[0].steps] == ["train", "evaluate", "publish"]


def test_a_run_with_the_selection_seed_or_a_rows_or_tables_flag_is_refused_before_anything_runs(capsys):
    from numlearn.pipeline import main

    assert main(["study", "qwen_coder", "--seeds", "0-2"]) == 2
    assert "holds seeds the selection trains (0)" in capsys.readouterr().err
    assert main(["study", "qwen_coder", "--tables-only"]) == 2
    assert "takes neither --tables-only nor --override" in capsys.readouterr().err


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_header_names_the_declaration_commit_and_says_when_it_is_not_one(tmp_path, monkeypatch):
    from types import SimpleNamespace

    repo = tmp_path / "repo"
    (repo / "conf" / "study").mkdir(parents=True)
    f = repo / "conf" / "study" / "s.yaml"
    f.write_text("name: s\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "root")
    monkeypatch.chdir(repo)
    cfg = SimpleNamespace(declaration="Power:  8.8 points\n at 5 seeds.")
    assert "NOT a pre-registration" in declaration_line(cfg, f)  # never committed
    _git(repo, "add", "conf")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "declare")
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    line = declaration_line(cfg, f)
    assert line == f"- declaration: `conf/study/s.yaml` at {sha}; Power: 8.8 points at 5 seeds."
    f.write_text("name: s\nrows: [changed]\n")  # changed after its commit: not what was declared
    assert "NOT a pre-registration" in declaration_line(cfg, f)

    out = tmp_path / "tables"
    (out / "sub").mkdir(parents=True)
    (out / "table1.md").write_text("<!-- generated -->\n- command: `x`\n- date: d\n- git: abc\n- machine: m\n\nbody\n")
    (out / "sub" / "notes.md").write_text("no header here\n")
    stamp(out, line)
    stamp(out, line)  # idempotent: one line, where the header is
    text = (out / "table1.md").read_text().split("\n")
    assert text[3:5] == ["- git: abc", line] and sum(x.startswith("- declaration: ") for x in text) == 1
    assert (out / "sub" / "notes.md").read_text() == "no header here\n"


def test_prune_deletes_the_weights_of_a_complete_run_only_and_keeps_their_hash(tmp_path):
    import torch
    from safetensors.torch import save_file

    from numlearn.rundirs import PRUNED, main, prune, run_is_complete, weights_sha256

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-30").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-30" / "optimizer.pt").write_bytes(b"x" * 1000)
    (run / "final" / "config.json").write_text("{}")
    (run / "eval").mkdir()
    (run / "eval" / "result.json").write_text("{}")
    with pytest.raises(ValueError, match="not a complete run"):
        prune(run)  # no run.json: weights nothing was measured on are never lost
    assert (run / "final").is_dir()
    (run / "run.json").write_text(json.dumps({"status": "complete"}))
    save_file({"a": torch.ones(16, 16)}, str(run / "final" / "model.safetensors"))
    sha = weights_sha256(run / "final")
    assert run_is_complete(run) and main(["prune", str(run)]) == 0
    info = json.loads((run / PRUNED).read_text())
    assert info["weights_sha256"] == sha and info["bytes_freed"] > 1000
    assert not (run / "final").exists() and not (run / "checkpoints").exists()
    assert (run / "eval" / "result.json").is_file() and (run / "run.json").is_file()
    assert not run_is_complete(run)  # a later evaluation retrains it
    assert main(["prune", str(run)]) == 2


@pytest.mark.long
def test_a_tuned_study_end_to_end_on_the_tiny_model_then_reuse_runs_nothing(tmp_path):
    """The three stages for real on a shrunken tiny study (2 steps, 2 problems): the selection's 4 runs, the choice
    written, the 3 rows x 3 fresh seeds, the tables with the declared primaries (CoT and PoT) and the declaration line;
    every run's weights pruned after publishing; a second run with --reuse trains nothing and chooses the same."""
    import shutil
    import sys

    import yaml

    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    text = (conf / "experiment" / "table1_tiny.yaml").read_text()
    preset = yaml.safe_load(text)
    preset["experiment_name"] = "tuned_tiny"
    preset.setdefault("train", {}).update(max_steps=2)
    preset.setdefault("data", {}).update(n_train=64)
    preset["eval"] = {**preset.get("eval", {}), "limit": 2, "teacher_forced": {"n": 4}}
    (conf / "experiment" / "tuned_tiny.yaml").write_text("# @package _global_\n" + yaml.safe_dump(preset))
    out = tmp_path / "tab"
    (conf / "study" / "tuned_tiny.yaml").write_text(yaml.safe_dump({
        "name": "tuned_tiny", "kind": "tuned", "experiment": "tuned_tiny", "rates": {"mle": [0.003, 0.006]},
        "grid": {"del_paper": [0.32, 1.28]}, "selection_seeds": [0], "evaluate": ["eval=synthetic_val"],
        "select_on": "synthetic_val (cot)", "exclude": ["synthetic_val"], "seeds": "1-3",
        "rows": ["mle@chosen", "del_paper@chosen", "del_ce@chosen:del_paper"], "out": str(out),
        "primary_modes": ["cot", "pot"], "family_metrics": ["accuracy", "digit_acc"], "keep_weights": False,
        "declaration": "a test"}))
    argv = [sys.executable, "-m", "numlearn.pipeline", "study", "tuned_tiny", "--jobs", "2", "--live", "off",
            "--store", str(tmp_path / "store"), "--outputs", str(tmp_path / "out")]
    env = {**__import__("os").environ, "NUMLEARN_CONF_DIR": str(conf)}
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-2000:]
    chosen_lr = json.loads((out / "selection" / "selected_lr.json").read_text())
    chosen_w = json.loads((out / "selection" / "selected.json").read_text())
    assert chosen_lr["mle"]["learning_rate"] in (0.003, 0.006) and set(chosen_lr["mle"]["candidates"]) == \
        {"0.003", "0.006"}
    assert chosen_w["del_paper"]["alpha"] in (0.32, 1.28) and chosen_w["del_paper"]["seeds"] == 1
    runs = sorted((tmp_path / "out" / "tuned_tiny" / "tiny").glob("*/alpha=*/seed=*"))
    assert len(runs) == 4 + 9, [str(p) for p in runs]
    assert all((p / "pruned.json").is_file() and not (p / "final").exists() for p in runs)
    seeds = {p.name for p in runs if "del_ce" in str(p)}
    assert seeds == {"seed=1", "seed=2", "seed=3"}  # the control ran on the fresh seeds only
    robust = (out / "robustness.md").read_text()
    assert "synthetic_test (pot)" in robust
    columns = (out / "table1.csv").read_text().splitlines()[0]
    assert "synthetic_test (pot)" in columns and "synthetic_val" not in columns  # the selection split stays out
    decl = [ln for ln in (out / "table1.md").read_text().splitlines() if ln.startswith("- declaration: ")]
    assert len(decl) == 1 and "NOT a pre-registration" in decl[0] and decl[0].endswith("; a test")
    again = subprocess.run([*argv, "--reuse"], cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("every seed has stored results (--reuse): nothing to run") == 4 + 3  # the selection points, then the rows (one evaluation each)
    assert json.loads((out / "selection" / "selected_lr.json").read_text()) == chosen_lr
