"""The committed result store: publish copies result files only, says when numbers changed, and
``pipeline pending`` finds exactly the seeds a REUSE=1 run still has to train."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numlearn import pipeline, rundirs
from numlearn.pipeline import configured_run_roots
from numlearn.reporting import store
from numlearn.reporting.collect import load_results

RUN = Path("table1_tiny/tiny/del/alpha=0.1")


def _recipe(seed, **train_changes):
    """The recipe of the configured run ``experiment=table1_tiny loss=del loss.alpha=0.1 seed=S``."""
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir

    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        r = rundirs.training_recipe(compose("config", overrides=["experiment=table1_tiny", "loss=del",
                                                                  "loss.alpha=0.1", f"seed={seed}"]))
    r["train"].update(train_changes)
    return r


def _result(correct, protocol="strict", limit=None, created="2026-12-01T00:00:00", seed=0, recipe=None):
    n = len(correct)
    return {"benchmark": {"name": "synthetic_val"}, "mode": "cot", "protocol": protocol,
            "metrics": {"accuracy": sum(correct) / n, "n": n}, "correct_by_id": {str(i): c for i, c in enumerate(correct)},
            "run": {"loss": "del", "alpha": 0.1, "heldout": {"digit_acc": 0.5},
                    "recipe": _recipe(seed) if recipe is None else recipe},
            "created": created, "config": {"eval": {"limit": limit}}}


def _write(root: Path, seed, bench="synthetic_val", mode="cot", **kw) -> Path:
    d = root / RUN / f"seed={seed}" / "eval" / bench / mode
    d.mkdir(parents=True, exist_ok=True)
    (d / "result.json").write_text(json.dumps(_result(seed=seed, **kw)))
    (d / "generations.jsonl").write_text('{"id": "0"}\n')
    return d / "result.json"


def test_publish_copies_result_files_and_reports_changed_numbers(tmp_path):
    out, st = tmp_path / "outputs", tmp_path / "store"
    f = _write(out, 0, correct=[1, 0, 1])
    (out / RUN / "seed=0" / "run.json").write_text("{}")
    got = store.publish([out / RUN], out, st)
    assert [p.relative_to(st) for p in got.new] == [RUN / "seed=0/eval/synthetic_val/cot/result.json"]
    assert sorted(p.name for p in st.rglob("*") if p.is_file()) == ["result.json"]  # no generations, no run.json
    # a re-evaluation with the same numbers but another date and commit is identical
    f.write_text(json.dumps(_result([1, 0, 1], created="2027-01-01T00:00:00")))
    got = store.publish([out / RUN / "seed=0"], out, st)
    assert (len(got.new), len(got.identical), len(got.changed)) == (0, 1, 0)
    # one problem flips: the same accuracy would hide it, the per-problem scores do not
    f.write_text(json.dumps(_result([0, 1, 1])))
    got = store.publish([out / RUN], out, st)
    assert len(got.changed) == 1 and "numbers differ" in got.summary()
    assert json.loads(got.changed[0].read_text())["correct_by_id"] == {"0": 0, "1": 1, "2": 1}  # newest wins


def test_publish_refuses_what_it_cannot_place_or_read(tmp_path):
    out, st = tmp_path / "outputs", tmp_path / "store"
    _write(tmp_path / "elsewhere", 0, correct=[1])
    with pytest.raises(store.StoreError, match="not inside the output directory"):
        store.publish([tmp_path / "elsewhere" / RUN], out, st)
    f = _write(out, 0, correct=[1])
    f.write_text('{"metrics": {}}')
    with pytest.raises(store.StoreError, match=r"result\.json: not a readable result file"):
        store.publish([out / RUN], out, st)
    assert store.main(["publish", str(out / "nope"), "--outputs", str(out), "--store", str(st)]) == 2


VAL = ["experiment=table1_tiny", "loss=del", "loss.alpha=0.1", "eval=synthetic_val"]


def test_pending_names_the_seeds_without_a_usable_stored_result(tmp_path, capsys):
    st = tmp_path / "store"
    _write(st, 0, correct=[1])
    _write(st, 1, correct=[1], protocol="official")      # another protocol does not count
    _write(st, 2, correct=[1], limit=10)                  # nor a result on the first 10 problems
    _write(st, 3, correct=[1])
    why = {}
    assert pipeline.pending_seeds([*VAL, "seed=0,1,2,3,4"], st, report=why.__setitem__) == [1, 2, 4]
    assert "protocol official" in why[1] and "problem limit 10" in why[2] and "no result" in why[4]
    assert pipeline.main(["pending", "--store", str(st), *VAL, "seed=0,1,3"]) == 0
    assert capsys.readouterr().out.strip() == "1"
    # the test evaluation wants synthetic_test and synthetic_ood, CoT and PoT: seed 0 has none of them
    test = [v for v in VAL if not v.startswith("eval=")]
    for bench in ("synthetic_test", "synthetic_ood"):
        _write(st, 5, bench=bench, mode="cot", correct=[1])
    assert pipeline.pending_seeds([*test, "seed=0,5"], st) == [0, 5]
    for bench in ("synthetic_test", "synthetic_ood"):
        _write(st, 5, bench=bench, mode="pot", correct=[1])
    assert pipeline.pending_seeds([*test, "seed=0,5"], st) == [0]


def test_pending_counts_a_result_trained_under_another_recipe_as_missing(tmp_path):
    """A preset change (here max_steps, the learning rate) must not let old numbers into a table
    built with the new preset; bookkeeping (logging) and an option added later at its null/false
    default leave the recipe as it was."""
    st = tmp_path / "store"
    _write(st, 0, correct=[1], recipe=_recipe(0, max_steps=7))
    _write(st, 1, correct=[1], recipe=_recipe(1, learning_rate=1e-3))
    _write(st, 2, correct=[1], recipe=_recipe(2, logging_steps=7))
    old = _recipe(3)
    old["train"].pop("sampling")  # a key the old preset did not have ...
    old["train"]["packing_new_option"] = False  # ... and one the new one lacks, at false
    _write(st, 3, correct=[1], recipe=old)
    _write(st, 4, correct=[1], recipe=_recipe(0))  # seed 0's recipe under seed 4's path
    why = {}
    assert pipeline.pending_seeds([*VAL, "seed=0,1,2,3,4"], st, report=why.__setitem__) == [0, 1, 3, 4]
    assert "train.max_steps: 7 -> " in why[0] and "train.learning_rate" in why[1]
    assert "train.sampling: None -> 'random'" in why[3] and "seed: 0 -> 4" in why[4]
    # a result file from before run.json recorded its recipe is judged by the config it was evaluated with
    legacy = _result([1], seed=2)
    del legacy["run"]["recipe"]
    legacy["config"].update({k: v for k, v in _recipe(2).items()})
    (st / RUN / "seed=2/eval/synthetic_val/cot/result.json").write_text(json.dumps(legacy))
    assert pipeline.pending_seeds([*VAL, "seed=2"], st) == []
    legacy["config"]["train"]["max_steps"] = 10
    (st / RUN / "seed=2/eval/synthetic_val/cot/result.json").write_text(json.dumps(legacy))
    assert pipeline.pending_seeds([*VAL, "seed=2"], st) == [2]


def test_rundirs_prints_seed_directories_in_the_store():
    dirs = configured_run_roots(["experiment=table1_tiny", "loss=mle,del", "seed=0,2", "paths.output_dir=results/runs"])
    assert [str(d) for d in dirs] == [f"results/runs/table1_tiny/tiny/{loss}/alpha={a}/seed={s}"
                                      for loss, a in (("mle", 0.0), ("del", 1.28)) for s in (0, 2)]


@pytest.mark.parametrize("override", ["seed=", "seed=,"])
def test_an_empty_seed_list_is_an_error_not_every_stored_seed(override, capsys):
    """Without its seed level a run root stands for every seed stored under it: an empty ``seed=``
    (e.g. a make variable that came out empty) must not turn into that."""
    with pytest.raises(ValueError, match="names no seed"):
        configured_run_roots(["experiment=table1_tiny", "loss=mle", override])
    with pytest.raises(ValueError, match="names no seed"):
        pipeline.pending_seeds(["experiment=table1_tiny", "loss=mle", override], "results/runs")
    assert pipeline.main(["runs", "experiment=table1_tiny", "loss=mle", override]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "names no seed" in err


def test_a_missing_run_is_an_error_not_a_smaller_table(tmp_path):
    _write(tmp_path, 0, correct=[1])
    with pytest.raises(FileNotFoundError, match="seed=1: no such result file or run directory"):
        load_results([tmp_path / RUN / "seed=0", tmp_path / RUN / "seed=1"])


def test_reuse_skips_a_row_the_store_already_holds(tmp_path):
    """--reuse asks the store first: every seed stored -> no job (nothing trained, nothing evaluated)."""
    st = tmp_path / "store"
    for seed in (0, 1):
        _write(st, seed, correct=[1])
    said = []
    jobs = pipeline.plan_rows([pipeline.Row("del", 0.1)], [0, 1], experiment="table1_tiny",
                              evaluate_overrides=["eval=synthetic_val"], store=st, outputs=tmp_path / "outputs",
                              reuse=True, say=said.append)
    assert jobs == [] and said == ["[del:0.1 eval=synthetic_val] every seed has stored results (--reuse): nothing to run"]
    assert not (tmp_path / "outputs").exists()
    (st / RUN / "seed=1/eval/synthetic_val/cot/result.json").unlink()
    said.clear()
    (job,) = pipeline.plan_rows([pipeline.Row("del", 0.1)], [0, 1], experiment="table1_tiny",
                                evaluate_overrides=["eval=synthetic_val"], store=st, outputs=tmp_path / "outputs",
                                reuse=True, say=said.append)
    assert said[-1] == "[del:0.1 eval=synthetic_val] seeds without stored results: 1"
    assert [p for p, _ in job.steps] == ["train", "evaluate synthetic_val", "publish"]
    assert "seed=1" in job.steps[0][1] and "eval=synthetic_val" in job.steps[1][1]


# -- a user's reproduction against the committed store (make reproduce-table1) ----------------------
def test_fields_added_since_are_no_difference_but_a_changed_number_is(tmp_path):
    """An older record lacks metrics.n_digit_problems and heldout.source: reproducing it exactly reads as
    identical. A changed accuracy, held-out digit accuracy or one flipped problem does not."""
    old = store.ResultRecord.from_dict(_result([1, 0, 1]))
    newer = _result([1, 0, 1], created="2027-01-01T00:00:00")
    newer["metrics"]["n_digit_problems"] = 3
    newer["run"]["heldout"]["source"] = "synthetic"
    newer["teacher_forced"] = None
    assert store.differences(old, store.ResultRecord.from_dict(newer)) == []
    # the old comparison (every field of numbers()) called this a change: the false alarm of a reproduction
    assert old.numbers() != store.ResultRecord.from_dict(newer).numbers()
    flipped = store.ResultRecord.from_dict(_result([1, 1, 0]))
    assert store.differences(old, flipped) == ["correct_by_id: 2 of 3 problems differ"]
    worse = _result([1, 0, 0])
    worse["run"]["heldout"]["digit_acc"] = 0.25
    d = store.differences(old, store.ResultRecord.from_dict(worse))
    assert "metrics.accuracy 0.666667 -> 0.333333" in d and "heldout.digit_acc 0.5 -> 0.25" in d


def test_compare_counts_identical_differing_and_absent_files_and_writes_nothing(tmp_path):
    mine, committed = tmp_path / "mine", tmp_path / "committed"
    same = _write(mine, 0, correct=[1, 0, 1])
    _write(committed, 0, correct=[1, 0, 1], created="2025-01-01T00:00:00")
    other = _write(mine, 1, correct=[1, 1, 1])
    _write(committed, 1, correct=[1, 0, 1])
    new = _write(mine, 2, correct=[0])
    before = sorted((p, p.stat().st_mtime_ns) for p in committed.rglob("*"))
    c = store.compare([same, other, new], mine, committed)
    assert sorted((p, p.stat().st_mtime_ns) for p in committed.rglob("*")) == before
    assert c.identical == [same.relative_to(mine)] and list(c.differ) == [other.relative_to(mine)]
    assert c.absent == [new.relative_to(mine)] and c.n == 3
    lines = c.lines("seed 0", Path("results/runs"))
    assert lines[-1] == ("seed 0: 1/3 result files identical to the committed store (results/runs); 1 differ "
                         "(listed above); 1 not in it")
    assert "metrics.accuracy 0.666667 -> 1" in lines[0] and "recorded versions" in lines[0]
    one = store.compare([same], mine, committed).lines("seed 0", Path("results/runs"))
    assert one == ["seed 0: 1/1 result files identical to the committed store (results/runs)"]


def test_a_difference_from_a_run_trained_on_another_cpu_says_so(tmp_path):
    """Same recipe and packages, other numbers: the line names the machines the records set apart (the
    store's seed 0 was trained on another CPU; training at its own commit here gives this machine's
    weights, not the store's), and says nothing of machines when the records agree."""
    mine, committed = tmp_path / "mine", tmp_path / "committed"
    f = _write(mine, 0, correct=[1, 1, 1])
    old = _write(committed, 0, correct=[1, 0, 1])
    here = {"platform": "Linux-b", "cpu": "Xeon [avx2 avx512f amx_tile]", "cpu_capability": "AVX512"}
    for path, env, run_env in ((old, {"platform": "Linux-a", "torch_threads": 2}, None), (f, here, here)):
        r = json.loads(path.read_text())
        r["packages"], r["environment"] = {"torch": "2.13.0"}, env
        if run_env:
            r["run"]["train_environment"] = run_env
        path.write_text(json.dumps(r))
    lines = store.compare([f], mine, committed).lines("seed 0", Path("results/runs"))
    assert "[machines: cpu not recorded by the store (this run: Xeon [avx2 avx512f amx_tile])" in lines[0]
    assert "platform Linux-a (store) vs Linux-b (this run)" in lines[0]
    assert lines[-1].endswith("trained on another machine: CPU float kernels differ in the last bits, and training "
                              "amplifies them (docs/development.md, 'Seed 0')")
    r = json.loads(old.read_text())
    r["environment"], r["run"]["train_environment"] = here, here  # the same machine: no machine is blamed
    old.write_text(json.dumps(r))
    lines = store.compare([f], mine, committed).lines("seed 0", Path("results/runs"))
    assert "machines" not in lines[0] and "another machine" not in lines[-1]


def test_a_recipe_key_one_side_lacks_is_a_format_change_not_another_recipe(tmp_path):
    """Seen on a fresh clone: the store's seed 0 records data.heldout, today's recipe does not (the held-out
    records moved to eval.teacher_forced); that alone must not read as 'trained under another recipe', or the
    machine explanation never shows. A value set on both sides that differs still does."""
    mine, committed = tmp_path / "mine", tmp_path / "committed"
    f = _write(mine, 0, correct=[1, 1, 1])
    old = _write(committed, 0, correct=[1, 0, 1])
    r = json.loads(old.read_text())
    r["run"]["recipe"]["data"]["heldout"] = {"n": 200}
    old.write_text(json.dumps(r))
    c = store.compare([f], mine, committed)
    assert not c.recipes.get(f.relative_to(mine)), c.recipes
    r["run"]["recipe"]["train"]["max_steps"] = 7
    old.write_text(json.dumps(r))
    assert store.compare([f], mine, committed).recipes[f.relative_to(mine)]
