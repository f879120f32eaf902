"""Issue 65: a model evaluated by path is stored, named and tabled as that model. Its results go to a directory
of its own (never a training run's), record its name, path and fingerprint with loss ``base``, table as a row
under its name, and a second model never writes over the first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SMALL = ["eval.benchmarks.synthetic_test.generator.n=3", "eval.benchmarks.synthetic_ood.generator.n=2",
         "eval.max_new_tokens_cap=4", "eval.modes=[cot]"]


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> dict[str, Path]:
    """Two stand-in models (numlearn.testing), saved as a user's model directories would be."""
    from numlearn import testing

    root = tmp_path_factory.mktemp("models")
    tok = testing.tokenizer()
    out = {}
    for name, seed in (("alpha-model", 0), ("beta-model", 1)):
        m = testing.model(len(tok), seed=seed, max_position_embeddings=1024)
        m.config.eos_token_id = m.config.pad_token_id = tok.eos_token_id
        m.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


def _evaluate(cli, model: Path, out: Path, *extra: str):
    r = cli("numlearn.evaluate", [f"model_path='{model}'", *SMALL, f"paths.output_dir={out}",
                                  f"paths.cache_dir={out.parent}/cache", *extra])
    return r


def test_two_models_by_path_get_their_own_places_records_and_rows(cli, two_models, tmp_path):
    from numlearn.provenance import model_fingerprint
    from numlearn.reporting.collect import load_results

    out = tmp_path / "out"
    for name in ("alpha-model", "beta-model"):
        assert _evaluate(cli, two_models[name], out).returncode == 0
    results = sorted(out.rglob("result.json"))
    assert len(results) == 4 and not (out / "default").exists()  # nothing under the default training run's dir
    places = {f.relative_to(out).parts[:3] for f in results}
    assert {p[:2] for p in places} == {("eval", "alpha-model"), ("eval", "beta-model")} and len(places) == 2
    for f in results:
        d = json.loads(f.read_text())
        name = f.relative_to(out).parts[1]
        assert d["run"]["model"] == name and d["run"]["loss"] == "base" and d["run"]["run_dir"] is None
        assert d["run"]["model_fingerprint"] == model_fingerprint(str(two_models[name]))
        assert d["run"]["model_path"] == str(two_models[name].resolve())
    df = load_results([out])
    rows = sorted(set(zip(df["model"], df["loss"])))
    assert rows == [("alpha-model", "base"), ("beta-model", "base")]  # two rows, never "?" or the tiny run's name
    table = tmp_path / "tables"
    r = cli("numlearn.reporting.aggregate", [str(out), "--out", str(table)])
    assert r.returncode == 0, r.stderr
    md = (table / "table1.md").read_text()
    assert "| alpha-model | base | 1 |" in md and "| beta-model | base | 1 |" in md and "| ? |" not in md


def test_a_second_model_into_the_first_ones_directory_is_refused(cli, two_models, tmp_path):
    out, shared = tmp_path / "out", tmp_path / "out" / "mine"
    assert _evaluate(cli, two_models["alpha-model"], out, f"eval_dir={shared}").returncode == 0
    before = {f: f.read_text() for f in shared.rglob("result.json")}
    r = _evaluate(cli, two_models["beta-model"], out, f"eval_dir={shared}")
    assert r.returncode != 0 and len(r.lines) == 1, r.stderr
    assert "holds results of another model" in r.lines[0] and "eval_dir=" in r.lines[0] and str(shared) in r.lines[0]
    assert {f: f.read_text() for f in shared.rglob("result.json")} == before  # nothing lost
    assert _evaluate(cli, two_models["alpha-model"], out, f"eval_dir={shared}").returncode == 0  # the same model resumes


def test_a_training_runs_final_model_is_evaluated_into_that_runs_eval(cli, tmp_path):
    out = tmp_path / "out"
    train = ["train.max_steps=2", "data.n_train=32", "train.per_device_train_batch_size=8", "experiment_name=e65",
             f"paths.output_dir={out}", f"paths.cache_dir={tmp_path}/cache"]
    assert cli("numlearn.train", train).returncode == 0
    run_dir = next(out.rglob("run.json")).parent
    # by its path alone, with none of the training's overrides: the results land in that run's eval/
    r = _evaluate(cli, run_dir / "final", out)
    assert r.returncode == 0, r.stderr
    found = sorted(out.rglob("result.json"))
    assert found and all(f.is_relative_to(run_dir / "eval") for f in found), found
    d = json.loads(found[0].read_text())
    assert d["run"]["experiment"] == "e65" and d["run"]["loss"] == "mle" and d["run"]["seed"] == 0


def test_default_eval_dir_and_model_label_by_hand():
    from numlearn.schema import default_eval_dir, model_label

    assert default_eval_dir("o/x/seed=0/final", "o/x/seed=0", "o") == "o/x/seed=0/eval"
    assert default_eval_dir("Qwen/Qwen2.5-1.5B", "o/x/seed=0", "o").startswith("o/eval/Qwen2.5-1.5B/")
    assert default_eval_dir("Qwen/Qwen2.5-1.5B", "r", "o") != default_eval_dir("Qwen/Qwen2.5-7B", "r", "o")
    assert model_label("data_cache/qwen-coder/hf") == "qwen-coder"
    assert model_label("o/e/tiny/mle/alpha=0.0/seed=3/checkpoints/checkpoint-30") == "seed=3-checkpoint-30"
    assert model_label("/models/my model!") == "my_model_"


def test_the_aggregator_refuses_a_row_that_mixes_a_model_by_path_with_run_seeds(two_models, tmp_path):
    import shutil

    from numlearn.reporting.collect import load_results

    root = Path(__file__).resolve().parents[1] / "results" / "runs" / "table1_tiny" / "tiny" / "mle" / "alpha=0.0"
    store = tmp_path / "store"
    shutil.copytree(root / "seed=0", store / "tiny" / "mle" / "alpha=0.0" / "seed=0")
    src = store / "tiny" / "mle" / "alpha=0.0" / "seed=0" / "eval" / "synthetic_test" / "cot" / "result.json"
    d = json.loads(src.read_text())
    d["run"].update(run_dir=None, seed=None)  # as a model evaluated by path that claims the run's name and loss
    dst = store / "eval" / "tiny" / "abc" / "synthetic_test" / "cot" / "result.json"
    dst.parent.mkdir(parents=True)
    dst.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="mixes a model evaluated by path with a training run's seeds"):
        load_results([store])


def test_score_check_regenerate_proves_the_completions_came_from_the_model(cli, two_models, tmp_path):
    """Issue 58 item 3: --check --regenerate K generates K lines again from the recorded model (greedy, hf on CPU:
    exact) and compares; the same files over another model's weights at that path fail."""
    import shutil

    from numlearn.evaluation.score import main as score_main

    model = tmp_path / "model"
    shutil.copytree(two_models["alpha-model"], model)
    out = tmp_path / "out"
    assert _evaluate(cli, model, out).returncode == 0
    gens = next(out.rglob("synthetic_test/cot/generations.jsonl"))
    assert score_main([str(gens), "--check", "--regenerate", "3"]) == 0
    for f in two_models["beta-model"].glob("*.safetensors"):
        shutil.copy(f, model / f.name)  # another model's weights where the result says its model is
    assert score_main([str(gens), "--check", "--regenerate", "3"]) == 1
