"""The orchestrator (numlearn.pipeline): what each command plans (rows, seeds, the command its tables
record), how jobs run (one line per job, a failing job named with its log, the others finishing), and
that the committed tables regenerate from the committed store."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numlearn import pipeline
from numlearn.pipeline import Job, PipelineError, Row, parse_seeds

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("spec,seeds", [("8", list(range(8))), ("1", [0]), ("3-7", [3, 4, 5, 6, 7]),
                                        ("0,2,5", [0, 2, 5]), ("4-4", [4])])
def test_seeds_are_a_count_a_range_or_a_list(spec, seeds):
    assert parse_seeds(spec) == seeds


@pytest.mark.parametrize("spec,msg", [("0", "at least one"), ("7-3", "empty"), ("a,b", "integers"), (",", "no seed")])
def test_bad_seeds_are_one_clear_error(spec, msg):
    with pytest.raises(PipelineError, match=msg):
        parse_seeds(spec)


def test_rows_name_a_loss_its_weight_and_extra_overrides():
    r = Row.parse("del:1.28+loss.form=paper+loss.place_weights=none")
    assert r == Row("del", 1.28, ("loss.form=paper", "loss.place_weights=none"))
    assert r.label == "del:1.28+loss.form=paper+loss.place_weights=none"
    assert r.overrides() == ["loss=del", "loss.alpha=1.28", "loss.form=paper", "loss.place_weights=none"]
    # a weight is written as the run dirs spell it: Hydra would read 1 as an int (alpha=1, not alpha=1.0)
    assert Row.parse("dist2:1").overrides() == ["loss=dist2", "loss.alpha=1.0"]
    assert Row.parse("mle").overrides() == ["loss=mle"]
    for bad, msg in (("del:x", "not a number"), ("del+form", "key=value"), ("DEL!", "loss\\[:alpha\\]")):
        with pytest.raises(PipelineError, match=msg):
            Row.parse(bad)


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """main() with its three effects recorded instead of run."""
    calls = {}
    monkeypatch.setattr(pipeline, "plan_rows", lambda rows, seeds, **kw: calls.setdefault("plan", (rows, seeds, kw))
                        and [Job("x", [], tmp_path / "x.log")])
    monkeypatch.setattr(pipeline, "run_jobs", lambda jobs, n, **kw: calls.setdefault("jobs", n) and [])
    monkeypatch.setattr(pipeline, "build_tables", lambda rows, seeds, out, **kw: calls.setdefault(
        "tables", (rows, seeds, out, kw)) and 0)
    monkeypatch.setattr(pipeline, "_docs_hint", lambda: None)
    sel = tmp_path / "selected.json"
    sel.write_text(json.dumps({"del": {"alpha": 0.01}, "dist2": {"alpha": 1.0}}))
    return calls, sel


def test_table1_runs_every_row_and_the_chosen_weights_then_tables_from_the_same_seeds(recorded):
    calls, sel = recorded
    assert pipeline.main(["table1", "--seeds", "2", "--jobs", "3", "--reuse", "--selected", str(sel)]) == 0
    rows, seeds, kw = calls["plan"]
    assert [r.label for r in rows] == ["mle", "ntl", "dist2", "del", "del:0.01", "dist2:1.0"]
    assert seeds == [0, 1] and kw["reuse"] and kw["evaluate_overrides"] == [] and calls["jobs"] == 3
    t_rows, t_seeds, out, t_kw = calls["tables"]
    assert t_rows == rows and t_seeds == [0, 1] and out == Path("results/table1_tiny")
    assert t_kw["command"] == f"make reproduce-table1 SEEDS=2 REUSE=1 (with --selected {sel})"  # given: recorded


def test_tables_train_nothing_and_unswept_reads_only_the_seeds_the_sweep_never_saw(recorded, capsys):
    calls, sel = recorded
    assert pipeline.main(["tables", "--seeds", "8", "--from-seed", "3", "--out", "/tmp/t", "--selected", str(sel),
                          "--command", "make table1-unswept SEEDS=8"]) == 0
    assert "plan" not in calls and "jobs" not in calls
    _, seeds, out, kw = calls["tables"]
    assert seeds == [3, 4, 5, 6, 7] and out == Path("/tmp/t") and kw["command"] == f"make table1-unswept SEEDS=8 (with --selected {sel})"
    assert pipeline.main(["tables", "--seeds", "3", "--from-seed", "3"]) == 2
    assert "leaves no seed from 3 on" in capsys.readouterr().err


def test_the_sweep_runs_its_grid_on_the_validation_split(recorded, monkeypatch):
    calls, _ = recorded
    seen = {}
    monkeypatch.setattr(pipeline, "sweep_report", lambda n, grid, **kw: seen.update(n=n, grid=grid, **kw) or 0)
    assert pipeline.main(["sweep", "--seeds", "3", "--grid", "del=0.001,0.01"]) == 0
    rows, seeds, kw = calls["plan"]
    assert rows[0] == Row("mle") and Row("del", 0.001) in rows and Row("del", 1.28) not in rows
    assert Row("dist2", 256.0) in rows and kw["evaluate_overrides"] == ["eval=synthetic_val"] and seeds == [0, 1, 2]
    assert seen["n"] == 3 and seen["grid"]["del"] == (0.001, 0.01)
    assert seen["command"] == ("make sweep-alpha SWEEP_SEEDS=3 SWEEP_DEL=0.001,0.01 SWEEP_NTL=0.1,1.0,3.2,12.8,25.6 "
                               "SWEEP_DIST2=0.1,0.32,1.0,10.0,32.0,128.0,256.0")


def test_the_committed_sweep_command_is_what_the_defaults_run():
    """The grids live once, in numlearn.pipeline: the committed sweep's header names them."""
    header = (REPO / "results/sweep_alpha/sweep.md").read_text().splitlines()[1]
    grid = pipeline.parse_grid([])
    cmd = "make sweep-alpha SWEEP_SEEDS=3" + "".join(f" SWEEP_{k.upper()}={','.join(map(repr, v))}"
                                                     for k, v in grid.items())
    assert f"`{cmd}`" in header


def test_sweep_report_regenerates_the_committed_sweep_from_the_store(tmp_path, monkeypatch):
    """`make sweep-report` on the committed store: the sweep's table and chosen weights, byte for byte. It
    failed ("results mix training recipes") once the chunked study put tiny_chunk3's validation runs beside
    tiny's, and would have listed other studies' DEL points and DEL-paper weights: it now reads the sweep
    model's grid points (and MLE) only."""
    monkeypatch.chdir(REPO)
    assert pipeline.main(["sweep-report", "--seeds", "3", "--out", str(tmp_path)]) == 0
    for f in ("sweep.csv", "selected.json"):
        assert (tmp_path / f).read_bytes() == (REPO / "results/sweep_alpha" / f).read_bytes(), f
    ours, committed = ((d / "sweep.md").read_text().splitlines() for d in (tmp_path, REPO / "results/sweep_alpha"))
    assert ours[5:] == committed[5:]  # below the header (command, date, git, machine)


def test_jobs_run_side_by_side_and_a_failure_is_named_with_its_log(tmp_path):
    py = sys.executable
    ok = Job("ok", [("train", [py, "-c", "print('step 1'); print('step 2')"]),
                    ("evaluate", [py, "-c", "print('done')"])], tmp_path / "ok.log")
    bad = Job("bad", [("train", [py, "-c", "import sys; print('boom'); sys.exit(3)"]),
                      ("evaluate", [py, "-c", "print('never')"])], tmp_path / "bad.log")
    out = io.StringIO()
    failed = pipeline.run_jobs([bad, ok], 2, stream=out, live=False)
    assert failed == [bad] and bad.rc == 3 and bad.phase == "failed" and ok.rc == 0 and ok.phase == "done"
    log = bad.log.read_text()
    assert "boom" in log and "never" not in log and f"see {bad.log}" in bad.note
    assert "step 2" in ok.log.read_text() and "done" in ok.log.read_text()
    lines = out.getvalue().splitlines()
    assert any(re.match(r"ERR bad\s+failed", ln) for ln in lines) and any(re.match(r"ok  ok\s+done", ln) for ln in lines)
    said = []
    pipeline._report_failures(failed, said.append)
    assert said[0].startswith("[bad] train exited 3") and any("boom" in s for s in said)
    with pytest.raises(PipelineError, match="at least 1"):
        pipeline.run_jobs([ok], 0)


def test_a_row_the_configs_cannot_name_stops_before_any_table(tmp_path, capsys):
    assert pipeline.main(["tables", "--rows", "mle,nosuchloss", "--seeds", "1", "--out", str(tmp_path / "t")]) == 2
    assert "nosuchloss" in capsys.readouterr().err
    assert not (tmp_path / "t").exists(), "a table was written without the row that failed"


@pytest.mark.long  # tests/test_tables_check.py (long too) regenerates this table and every other study's through make
def test_the_committed_table1_regenerates_from_the_committed_store(tmp_path, monkeypatch):
    """Every committed result file still reads, and Table 1 rebuilt from the store equals the committed
    files line for line, less the provenance header (command, date, git, machine)."""
    from numlearn.reporting import aggregate

    monkeypatch.chdir(REPO)  # the tables name the selection file as the make target does, relative
    rows = [Row(x) for x in pipeline.TABLE1_LOSSES] + pipeline.selected_rows(pipeline.SELECTED)
    runs = pipeline.table1_runs(rows, parse_seeds("8"), experiment="table1_tiny", store=pipeline.STORE)
    out = tmp_path / "t"
    with __import__("contextlib").redirect_stdout(io.StringIO()):
        assert aggregate.main([*runs, "--exclude-benchmarks", "synthetic_val", "--out", str(out),
                               "--selected", str(pipeline.SELECTED)]) == 0
    header = re.compile(r"^- (command|date|git|machine): ")
    for f in ("table1.md", "table1.csv", "table1.tex", "digits.csv", "vs_mle.csv", "distance_vs_mle.csv",
              "heldout_vs_mle.csv", "summary.json"):
        want = [ln for ln in (REPO / "results/table1_tiny" / f).read_text().splitlines() if not header.match(ln)]
        got = [ln for ln in (out / f).read_text().splitlines() if not header.match(ln)]
        assert got == want, f


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_the_makefile_calls_the_pipeline_and_holds_no_loops():
    def dry(*args):
        r = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return [ln for ln in r.stdout.splitlines() if "numlearn.pipeline" in ln]
    # the user's command writes under outputs/ and compares with the committed store; the maintainers' publishes
    user = dry("reproduce-table1", "SEEDS=8", "REUSE=1", "JOBS=4")[-1]
    assert "-m numlearn.pipeline table1 --seeds 8 --jobs 4 --store outputs/store --out outputs/table1_tiny/tables " \
           "--compare-with results/runs" in user and "--reuse" in user
    # the tables' header names the command that made them (it said make reproduce-table1 before)
    assert dry("table1-publish", "SEEDS=8", "REUSE=1", "JOBS=4")[-1].endswith(
        '-m numlearn.pipeline table1 --seeds 8 --jobs 4 --command "make table1-publish SEEDS=8 REUSE=1" --reuse')
    assert '--command "make table1-publish SEEDS=8" ' in dry("table1-publish", "SEEDS=8", "JOBS=4")[-1]
    assert "--seeds 8 --from-seed 3 --out results/table1_tiny/unswept_seeds" in dry("table1-unswept", "SEEDS=8")[-1]
    assert dry("sweep-alpha")[-1].endswith("-m numlearn.pipeline sweep --seeds 3 --jobs 4 ")
    text = (REPO / "Makefile").read_text()
    assert "$(shell" not in text
    code = [ln for ln in text.splitlines() if ln.startswith("\t")]  # the recipes
    for banned in (r"\bfor \w+ in\b", r"\bwhile\b", r"\bxargs\b", r" -c ['\"]", r"\$\(shell\b", r"\bif \["):
        hits = [ln for ln in code if re.search(banned, ln)]
        assert not hits, f"the Makefile holds {hits[0]!r}: orchestration belongs in numlearn.pipeline / tools/env.py"


@pytest.mark.long
def test_table1_end_to_end_on_two_shrunken_rows_then_reuse_runs_nothing(tmp_path):
    """The real chain (train -> evaluate -> publish -> tables) on two rows shrunk to 2 steps and 2
    problems, two jobs at once; a second --reuse run trains nothing and rebuilds the same tables."""
    small = "+train.max_steps=2+data.n_train=64+eval.teacher_forced.n=4+eval.limit=2"
    argv = ["table1", "--rows", f"mle{small},del{small}", "--seeds", "1", "--jobs", "2", "--live", "off",
            "--store", str(tmp_path / "store"), "--outputs", str(tmp_path / "out"), "--out", str(tmp_path / "tab"),
            "--selected", str(tmp_path / "none.json")]
    r = subprocess.run([sys.executable, "-m", "numlearn.pipeline", *argv], cwd=REPO, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"^ok  mle\+train.max_steps=2\S* seed=0\s+done", r.stdout, re.M), r.stdout[-2000:]
    stored = sorted(p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store").rglob("result.json"))
    assert len(stored) == 8 and "table1_tiny/tiny/del/alpha=1.28/seed=0/eval/synthetic_test/cot/result.json" in stored
    table = (tmp_path / "tab" / "table1.md").read_text()
    assert "| tiny | del | 1 |" in table
    assert "- command: `python -m numlearn.pipeline table1 --rows mle+train.max_steps=2" in table  # not the alias
    again = subprocess.run([sys.executable, "-m", "numlearn.pipeline", *argv, "--reuse"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("every seed has stored results (--reuse): nothing to run") == 2
    body = [ln for ln in (tmp_path / "tab" / "table1.md").read_text().splitlines() if not ln.startswith("- ")]
    assert body == [ln for ln in table.splitlines() if not ln.startswith("- ")]


def test_a_run_two_requests_want_is_one_job_with_both_evaluations(tmp_path):
    """A sweep point that is also a table row (del 1.28, seeds 0-2): trained once, evaluated on both
    splits in one job -- two jobs would train one run dir at the same time. Jobs are seed-major."""
    rows = (Row("mle"), Row("del"))  # del at its configured weight, 1.28: the same run dirs as del:1.28
    jobs = pipeline.plan([pipeline.Request(rows, (0, 1)), pipeline.Request((Row("del", 1.28),), (0,), ("eval=synthetic_val",))],
                         experiment="table1_tiny", store=tmp_path / "s", outputs=tmp_path / "o", reuse=False)
    assert [j.name for j in jobs] == ["mle seed=0", "del seed=0", "mle seed=1", "del seed=1"]
    assert [p for p, _ in jobs[1].steps] == ["train", "evaluate", "evaluate synthetic_val", "publish"]
    assert [p for p, _ in jobs[3].steps] == ["train", "evaluate", "publish"]
    assert jobs[1].steps[-1][1][-5].endswith("del/alpha=1.28/seed=0")


def test_the_live_display_redraws_running_jobs_and_a_summary(tmp_path):
    py = sys.executable
    jobs = [Job(f"j{i}", [("train", [py, "-c", "import time; time.sleep(1.2)"])], tmp_path / f"j{i}.log")
            for i in range(3)]
    out = io.StringIO()
    assert pipeline.run_jobs(jobs, 2, stream=out, live=True) == []
    text = out.getvalue()
    assert "\x1b[2K>>  j0" in text and "running" in text  # a running job's line, redrawn in place
    last = text.rsplit("F", 1)[-1]  # the last redraw, after its cursor-up
    assert "\x1b[2K3/3 jobs done, 0 running, 0 waiting, 0 failed\n" in last and ">>" not in last


@pytest.mark.long
def test_the_chunked_tokenizer_table_end_to_end_on_a_shrunken_rehearsal(tmp_path):
    """python -m numlearn.pipeline chunked (make chunked-tiny), shrunk to 2 steps and 2 problems, one
    loss and one weight: MLE on both tokenizers, the chunked model's validation sweep, the chosen row on
    the test splits, the chunked table and the tokenisation effect across the two models."""
    shrink = ["train.max_steps=2", "data.n_train=64", "eval.teacher_forced.n=4", "eval.limit=2"]
    argv = ["chunked", "--seeds", "1", "--sweep-seeds", "1", "--only", "ntl_number", "--grid", "ntl_number=0.001",
            "--jobs", "2", "--live", "off", "--store", str(tmp_path / "store"), "--outputs", str(tmp_path / "out"),
            "--out", str(tmp_path / "tab"), *(x for o in shrink for x in ("--override", o))]
    r = subprocess.run([sys.executable, "-m", "numlearn.pipeline", *argv], cwd=REPO, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    stored = {p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store").rglob("result.json")}
    assert "table1_tiny/tiny/mle/alpha=0.0/seed=0/eval/synthetic_test/cot/result.json" in stored
    assert "table1_tiny/tiny_chunk3/mle/alpha=0.0/seed=0/eval/synthetic_val/cot/result.json" in stored
    assert "table1_tiny/tiny_chunk3/ntl_number/alpha=0.001/seed=0/eval/synthetic_test/pot/result.json" in stored
    assert not any("tiny/ntl_number" in s for s in stored)  # the sweep is the chunked model's only
    table = (tmp_path / "tab" / "table1.md").read_text()
    assert "| tiny_chunk3 | mle | 1 |" in table and "ntl_number (alpha=0.001, val-chosen)" in table
    assert "| tiny |" not in table  # the single-digit model is in the tokenisation table, not this one
    tok = (tmp_path / "tab" / "tokenisation" / "tokenisation.md").read_text()
    assert "mle (tiny_chunk3)" in tok and "`mle (tiny)`" in tok


def test_a_running_job_says_its_step_its_eta_and_its_log(tmp_path):
    """250 of 1,000 steps in 100 s: 750 left at 0.4 s each, ETA 300 s = 5 min; a tqdm bar reads the same;
    a line without a count is shown as it is."""
    job = Job("del seed=0", [], tmp_path / "del.log", phase="train")
    job.phase_started = 1000.0
    note = job.progress_note("step 250/1000 loss=1.2 loss/ce=0.9", now=1100.0)
    assert note == f"step 250/1000, ETA 5 min  (log: {tmp_path / 'del.log'})"
    # a save's 1/1 bar after the last step line is not the step count
    saved = "step 950/1000 loss=1\nWriting model shards: 100%|##| 1/1 [00:00<00:00]"
    assert job.progress_note(saved, now=1100.0).startswith("step 950/1000, ETA 5 s")
    job.phase = "evaluate"
    assert job.progress_note("cot:  40%|####  | 80/200 [00:30<00:45]", now=1030.0).startswith("80/200, ETA 45 s")
    assert job.progress_note("[numlearn.evaluate] loading", now=1030.0) == "[numlearn.evaluate] loading"


def test_without_a_terminal_the_running_jobs_are_reported_every_interval(tmp_path):
    """make into a pipe: besides the phase changes, each running job's line (step, ETA, log) every
    `every` seconds -- the 21 silent minutes of a reproduction are gone."""
    py = sys.executable
    code = "import time\nfor i in range(1, 5):\n    print(f'step {i*10}/40', flush=True); time.sleep(0.6)"
    job = Job("slow", [("train", [py, "-c", code])], tmp_path / "slow.log")
    out = io.StringIO()
    from numlearn import jobs

    orig = jobs.Progress

    class Fast(orig):
        def __init__(self, jobs, stream=None, live=None):
            super().__init__(jobs, stream, live, every=0.9)

    jobs.Progress = Fast
    try:
        assert jobs.run_jobs([job], 1, stream=out, live=False) == []
    finally:
        jobs.Progress = orig
    beats = [ln for ln in out.getvalue().splitlines() if ln.startswith(">>  slow") and "step " in ln]
    assert beats and re.search(r"step \d+/40, ETA \d+ s  \(log: .*slow\.log\)", beats[-1]), out.getvalue()
    assert "1/1 jobs done" not in out.getvalue().splitlines()[0]


# ---------------------------------------------------------------- the released checkpoints (issue 42)
@pytest.mark.distributed  # ~25 s of evaluations: the end-to-end tier CI runs (make test-distributed)
def test_released_study_runs_end_to_end_on_local_stand_ins(saved_tiny_model, tmp_path, data_dir, capsys):
    """pipeline -> evaluate (eval=paper, HF backend on CPU, 2 problems a benchmark) -> store -> table, with the
    hub ids mapped to local stand-ins; the table's mACC is the mean of the stored accuracies, the authors'
    number stands beside it, and a re-run with --reuse evaluates nothing."""
    base = tmp_path / "base"
    shutil.copytree(saved_tiny_model, base)
    store, out, table = tmp_path / "store", tmp_path / "out", tmp_path / "table"
    argv = ["released", "--models", "qwen2.5-1.5b", "--with-base", "--hub-map", f"Zzh-tju/qwen2.5-1.5B={saved_tiny_model}",
            "--hub-map", f"Qwen/Qwen2.5-1.5B={base}", "--store", str(store), "--outputs", str(out), "--out", str(table),
            "--live", "off", *[x for o in ("eval.backend=hf", "eval.limit=2", "eval.dtype=float32",
                                           "eval.tensor_parallel_size=1", "eval.max_new_tokens_cap=8",
                                           f"paths.data_dir={data_dir}", "eval.teacher_forced.n=2")
                              for x in ("--override", o)]]
    assert pipeline.main(argv) == 0
    results = sorted(store.rglob("result.json"))
    assert len(results) == 14 and all("/released/qwen2.5-1.5b/" in str(f) for f in results)
    data = json.loads((table / "table.json").read_text())
    for role, model in (("released", saved_tiny_model), ("base", base)):
        stored = [json.loads(f.read_text()) for f in results if f"/{role}/eval/" in str(f)]
        assert {r["model_path"] for r in stored} == {str(Path(model).resolve())}
        assert {r["protocol"] for r in stored} == {"official"} and {r["mode"] for r in stored} == {"paper"}
        mean = sum(100 * r["metrics"]["accuracy"] for r in stored) / 7
        assert data[f"qwen2.5-1.5b/{role}"]["macc"] == pytest.approx(mean)
    md = (table / "table.md").read_text()
    assert "| 55.4 |" in md and "52.8 (paper's MLE row)" in md
    capsys.readouterr()
    assert pipeline.main([*argv, "--reuse"]) == 0
    seen = capsys.readouterr()
    assert (seen.out + seen.err).count("stored results found (--reuse)") == 2


def test_released_study_refuses_unknown_models_and_keys(tmp_path):
    from numlearn import released

    with pytest.raises(ValueError, match="unknown nope; choose from qwen2.5-1.5b"):
        released.choose(released.load_study(REPO / "conf" / "study" / "released.yaml"), "nope")
    bad = tmp_path / "s.yaml"
    bad.write_text("models:\n  m:\n    hub: a\n    base: b\n    experimnt: x\n")
    with pytest.raises(ValueError, match=r"models.m: unknown key\(s\) \['experimnt'\]"):
        released.load_study(bad)


def test_released_study_without_the_hub_says_what_is_missing_in_one_line(tmp_path, monkeypatch, capsys):
    """Issue 60 item 9: offline, with no local copy, the study once ran its evaluation, failed in a log and printed
    an empty table; now one line names the model and the command that fixes it, and nothing runs. A --hub-map
    directory answers for its model."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pipeline, "run_jobs", lambda *a, **k: pytest.fail("nothing may run"))
    args = ["released", "--models", "qwen2.5-1.5b", "--store", str(tmp_path / "s"), "--outputs", str(tmp_path / "o"),
            "--out", str(tmp_path / "t"), "--live", "off"]
    assert pipeline.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Zzh-tju/qwen2.5-1.5B: neither a local directory (--hub-map)" in err[0]
    assert "huggingface-cli download ID --local-dir DIR" in err[0]
    assert not (tmp_path / "t").exists()
    (tmp_path / "m").mkdir()
    ran = []
    monkeypatch.setattr(pipeline, "run_jobs", lambda jobs, *a, **k: ran.extend(jobs) or [])
    assert pipeline.main([*args, "--hub-map", f"Zzh-tju/qwen2.5-1.5B={tmp_path / 'm'}"]) == 0
    assert [j.name for j in ran] == ["qwen2.5-1.5b released"]


def test_released_table_averages_the_benchmarks_present_and_says_how_many(tmp_path):
    """mACC over the benchmarks the store holds (3 of 7 here), labelled as partial; not the 7-way mean."""
    from numlearn import released

    study = released.load_study(REPO / "conf" / "study" / "released.yaml")
    ck = study["qwen2.5-1.5b"]
    for bench, acc in (("gsm8k", 0.5), ("svamp", 0.25), ("math", 0.0)):
        d = tmp_path / "store" / "released" / ck.name / "released" / "eval" / bench / "paper"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({"benchmark": {"name": bench}, "mode": "paper", "protocol": "official",
                                                   "metrics": {"accuracy": acc, "n": 4}, "correct_by_id": {},
                                                   "run": {}, "config": {}, "model_path": ck.hub}))
    benches = ("gsm8k", "svamp", "simuleq", "math", "aqua", "sat", "mmlu_mathematics")
    md = released.table([ck], tmp_path / "store", tmp_path / "out", "pytest", benches)
    data = json.loads((tmp_path / "out" / "table.json").read_text())[f"{ck.name}/released"]
    assert data["macc"] == pytest.approx(25.0) and data["benchmarks_present"] == 3
    assert "| 25.0 (3 of 7) | 55.4 |" in md


# -- studies as data (issue 43): conf/study/*.yaml --------------------------------------------------------------
STUDIES = sorted(p.stem for p in (REPO / "conf" / "study").glob("*.yaml"))


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_file_reads_through_its_schema(name):
    cfg = pipeline.study(name)
    assert cfg.name == name
    if cfg.kind in ("rows", "pretrained", "ablation"):
        assert cfg.rows and all(Row.parse(r) for r in cfg.rows)
    if cfg.kind in ("sweep", "ablation", "chunked"):
        assert cfg.grid and all(cfg.grid.values())


def test_the_named_studies_are_what_their_files_say():
    """The pipeline's Table 1, sweep, ablation, chunked and pretrained definitions are read from conf/study."""
    from omegaconf import OmegaConf

    t1 = OmegaConf.load(REPO / "conf" / "study" / "table1.yaml")
    assert pipeline.TABLE1_LOSSES == tuple(t1.rows) and pipeline.EXPERIMENT == t1.experiment
    ab = OmegaConf.load(REPO / "conf" / "study" / "ablation.yaml")
    assert pipeline.ABLATION_CONTROLS == tuple(ab.controls) and pipeline.ABLATION_GRID["del"] == tuple(ab.grid["del"])


def test_a_new_loss_in_the_table1_file_enters_reproduce_table1(recorded, tmp_path, monkeypatch):
    """A line in conf/study/table1.yaml, not a constant in the code: the row is planned and tabulated."""
    import importlib
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    f = conf / "study" / "table1.yaml"
    f.write_text(f.read_text().replace("rows: [mle, ntl, dist2, del]", "rows: [mle, ntl, dist2, del, del_ce]"))
    monkeypatch.setenv("NUMLEARN_CONF_DIR", str(conf))
    calls, sel = recorded
    fresh = importlib.reload(pipeline)
    try:
        for name in ("plan_rows", "run_jobs", "build_tables", "_docs_hint"):  # reload dropped the recorders
            monkeypatch.setattr(fresh, name, {"plan_rows": lambda rows, seeds, **kw: calls.setdefault(
                "plan", (rows, seeds, kw)) and [Job("x", [], tmp_path / "x.log")],
                "run_jobs": lambda jobs, n, **kw: [], "build_tables": lambda rows, seeds, out, **kw: calls.setdefault(
                "tables", (rows, seeds, out, kw)) and 0, "_docs_hint": lambda: None}[name])
        assert fresh.main(["table1", "--seeds", "1", "--selected", "none"]) == 0
        assert [r.label for r in calls["plan"][0]] == ["mle", "ntl", "dist2", "del", "del_ce"]
    finally:
        monkeypatch.delenv("NUMLEARN_CONF_DIR")
        importlib.reload(pipeline)


def test_a_rows_study_runs_as_table1_with_its_declarations(recorded):
    calls, _ = recorded
    assert pipeline.main(["study", "smollm2_gsm8k", "--seeds", "5", "--jobs", "1", "--reuse"]) == 0
    rows, seeds, kw = calls["plan"]
    assert [r.label for r in rows] == ["mle", "del:1.28", "del_paper:0.32", "del_ce:0.32"]
    assert kw["experiment"] == "smollm2_gsm8k_study" and seeds == [0, 1, 2, 3, 4] and kw["reuse"]
    _, _, out, t_kw = calls["tables"]
    assert out == Path("results/smollm2_gsm8k") and t_kw["report"].primary_benchmark == "gsm8k"
    assert t_kw["report"].family_metrics == ("digit_acc", "digit_nll") and t_kw["selected"] is None
    assert t_kw["command"] == "make smollm2-gsm8k SEEDS=5 REUSE=1"


def test_a_study_of_another_kind_or_a_misspelt_key_is_one_line(tmp_path, capsys, monkeypatch):
    assert pipeline.main(["study", "ablation", "--plan"]) == 2  # the named study runs as its command, which refuses
    assert "ablation runs on this machine's worker pool only" in capsys.readouterr().err  # --plan before any job
    assert pipeline.main(["study", "nope"]) == 2
    assert "unknown study 'nope'" in capsys.readouterr().err
    from numlearn.schema import load_study_config

    f = tmp_path / "s.yaml"
    f.write_text("name: s\nrowz: [mle]\n")
    with pytest.raises(ValueError, match="Key 'rowz' not in 'StudyConfig'"):
        load_study_config(f)


def test_a_paper_preset_gets_its_own_rows_not_the_tiny_models_chosen_weights(recorded, capsys):
    """Issue 60 item 6: ``table1 --experiment table1_qwen2.5-1.5b`` once added the tiny sweep's val-chosen
    weights silently (22 jobs instead of 13); now the paper rows alone, and a line says why. A file given
    explicitly is still used, and said."""
    calls, sel = recorded
    assert pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--seeds", "1"]) == 0
    assert [r.label for r in calls["plan"][0]] == list(pipeline.TABLE1_LOSSES)
    assert calls["tables"][3]["selected"] is None
    assert "the tiny model's" in capsys.readouterr().err
    calls.clear()
    assert pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--seeds", "1", "--selected", str(sel)]) == 0
    assert [r.label for r in calls["plan"][0]][-2:] == ["del:0.01", "dist2:1.0"]
    assert f"adding the chosen weights of {sel}" in capsys.readouterr().err
    calls.clear()
    assert pipeline.main(["table1", "--seeds", "1"]) == 0  # the tiny recipe: its own sweep's choice, as before
    assert calls["tables"][3]["selected"] == pipeline.SELECTED


def test_a_tables_header_records_the_overrides_a_make_alias_does_not_name(recorded):
    """Issue 66 item 2: `make reproduce-table1 ARGS="--override train.max_steps=30"` passed --command "make
    reproduce-table1 SEEDS=1", so the header named the alias alone; what changed the recipe is appended now."""
    calls, _ = recorded
    assert pipeline.main(["table1", "--seeds", "1", "--command", "make reproduce-table1 SEEDS=1", "--override",
                          "train.max_steps=30", "--rows", "mle,del", "--selected", "none"]) == 0
    command = calls["tables"][3]["command"]
    assert command == ("make reproduce-table1 SEEDS=1 (with --override train.max_steps=30 --rows mle,del "
                       "--selected none)"), command
    calls.clear()
    assert pipeline.main(["table1", "--seeds", "1", "--command", "make reproduce-table1 SEEDS=1"]) == 0
    assert calls["tables"][3]["command"] == "make reproduce-table1 SEEDS=1"  # the default run: nothing to add


def test_help_works_with_a_broken_study_file_and_every_command_names_it_in_one_line(tmp_path):
    """Issue 62: the named studies are read at import; a misspelt key in one of them made `pipeline --help` a
    traceback. Now every --help works, and any command ends in one line naming the file and the key."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    f = conf / "study" / "sweep.yaml"
    f.write_text(f.read_text().replace("\ngrid:", "\ngird:"))
    env = {**os.environ, "NUMLEARN_CONF_DIR": str(conf)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "numlearn.pipeline", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    for args in (["--help"], ["table1", "--help"], ["study", "--help"]):
        r = run(*args)
        assert r.returncode == 0 and "usage: python -m numlearn.pipeline" in r.stdout, (args, r.stderr[-2000:])
    r = run("tables", "--seeds", "8")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr[-2000:]
    assert "conf/study/sweep.yaml does not load" in err[0] and "'gird'" in err[0]


def test_study_dispatches_a_named_study_to_its_command_and_refuses_an_unnamed_one_of_that_kind(tmp_path, capsys):
    from numlearn.pipeline import main

    assert main(["study", "sweep", "--plan"]) == 2  # the sweep command's own refusal: it ran as `sweep`
    assert "sweep runs on this machine's worker pool only" in capsys.readouterr().err
    assert main(["study", "mle_lr", "--seeds", "0-2"]) == 2  # mle-lr's: its selection seeds are 0-2
    assert "holds seeds the rate is chosen on" in capsys.readouterr().err
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    shutil.copy(conf / "study" / "ablation.yaml", conf / "study" / "my_ablation.yaml")
    (conf / "study" / "my_ablation.yaml").write_text((conf / "study" / "my_ablation.yaml").read_text().replace(
        "name: ablation", "name: my_ablation"))
    r = subprocess.run([sys.executable, "-m", "numlearn.pipeline", "study", "my_ablation"], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "NUMLEARN_CONF_DIR": str(conf)})
    assert r.returncode == 2 and "runs as its named study only (`python -m numlearn.pipeline study ablation`)" in \
        r.stderr, r.stderr[-2000:]
