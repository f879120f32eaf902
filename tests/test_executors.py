"""The pipeline's executors (issue 46): the stage graph, the SLURM submission as sbatch renders it (a recording
executor: nothing is submitted), the state file that makes a rerun submit only what failed, and --plan on every
paper preset against the preset itself. The submitit local executor end to end: tests/test_distributed.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from numlearn import pipeline
from numlearn.executors import (
    DONE,
    FAILED,
    PENDING,
    RUNNING,
    Executor,
    ExecutorError,
    RecordingExecutor,
    Resources,
    Stage,
    State,
    stage_graph,
    submit_graph,
)
from numlearn.jobs import Job

pytest.importorskip("submitit")
REPO = Path(__file__).resolve().parents[1]
PAPER = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("table1_*.yaml") if p.stem != "table1_tiny")


def _jobs(tmp_path, rows=("mle", "del"), seeds=(0,)):
    return [Job(f"{r} seed={s}", [("train", ["py", "-m", "numlearn.train", f"loss={r}"]),
                                   ("evaluate", ["py", "-m", "numlearn.evaluate", f"loss={r}"]),
                                   ("publish", ["py", "-m", "numlearn.reporting.store", "publish"])],
                tmp_path / f"{r}.log") for s in seeds for r in rows]


TRAIN = Resources(gpus_per_node=4, tasks_per_node=4, cpus_per_task=8, mem_gb=256, timeout_min=2880, partition="gpu")
EVAL = Resources(gpus_per_node=4, cpus_per_task=8, timeout_min=720, partition="gpu")
PUB = Resources(timeout_min=30, partition="gpu")


def test_the_graph_is_train_then_evaluate_then_publish_then_tables(tmp_path):
    stages = stage_graph(_jobs(tmp_path), TRAIN, EVAL, PUB, tables_argv=["py", "tables"])
    after = {s.key: s.after for s in stages}
    assert after == {"mle seed=0 train": [], "mle seed=0 evaluate": ["mle seed=0 train"],
                     "mle seed=0 publish": ["mle seed=0 evaluate"], "del seed=0 train": [],
                     "del seed=0 evaluate": ["del seed=0 train"], "del seed=0 publish": ["del seed=0 evaluate"],
                     "tables": ["mle seed=0 publish", "del seed=0 publish"]}
    assert [s.resources for s in stages[:3]] == [TRAIN, EVAL, PUB]


def test_slurm_submission_renders_one_task_per_gpu_and_an_afterok_chain(tmp_path):
    rec = RecordingExecutor(tmp_path / "sub")
    stages = stage_graph(_jobs(tmp_path, rows=("del",)), TRAIN, EVAL, PUB, tables_argv=["py", "tables"])
    out = submit_graph(stages, rec, State(tmp_path / "state.json"), say=lambda m: None)
    assert out.submitted == [s.key for s in stages]
    by_key = {j["key"]: j for j in rec.submitted}
    train = by_key["del seed=0 train"]
    sb = train["sbatch"]
    assert "#SBATCH --gpus-per-node=4" in sb and "#SBATCH --ntasks-per-node=4" in sb and "#SBATCH --time=2880" in sb
    assert "#SBATCH --partition=gpu" in sb and "#SBATCH --mem=256GB" in sb and "--dependency" not in sb
    ev = by_key["del seed=0 evaluate"]
    assert f"#SBATCH --dependency=afterok:{train['id']}" in ev["sbatch"] and "#SBATCH --ntasks-per-node=1" in ev["sbatch"]
    assert f"afterok:{ev['id']}" in by_key["del seed=0 publish"]["sbatch"]
    assert by_key["tables"]["after"] == [by_key["del seed=0 publish"]["id"]]
    state = json.loads((tmp_path / "state.json").read_text())["jobs"]
    assert {k: v["id"] for k, v in state.items()} == {k: j["id"] for k, j in by_key.items()}


def test_a_rerun_submits_nothing_running_and_resubmits_only_what_failed(tmp_path):
    rec = RecordingExecutor(tmp_path / "sub")
    stages = stage_graph(_jobs(tmp_path), TRAIN, EVAL, PUB, tables_argv=["py", "tables"])
    state = State(tmp_path / "state.json")
    submit_graph(stages, rec, state, say=lambda m: None)
    n = len(rec.submitted)
    again = submit_graph(stages, rec, State(tmp_path / "state.json"), say=lambda m: None)  # all pending
    assert len(rec.submitted) == n and not again.submitted and len(again.running) == n
    ids = {j["key"]: j["id"] for j in rec.submitted}
    for k in ids:
        rec.states[ids[k]] = DONE
    rec.states[ids["del seed=0 train"]] = FAILED  # del's training failed: its chain never ran (afterok)
    rec.states[ids["del seed=0 evaluate"]] = FAILED
    rec.states[ids["del seed=0 publish"]] = FAILED
    rec.states[ids["tables"]] = FAILED
    said = []
    third = submit_graph(stages, rec, State(tmp_path / "state.json"), say=said.append)
    assert third.resubmitted == ["del seed=0 train", "del seed=0 evaluate", "del seed=0 publish", "tables"]
    assert set(third.done) == {"mle seed=0 train", "mle seed=0 evaluate", "mle seed=0 publish"}
    assert any("del seed=0 train: job" in m and "failed: resubmitted" in m for m in said)
    new = {j["key"]: j for j in rec.submitted[n:]}
    # the resubmitted evaluation waits for the new training; the finished mle publish is not waited for
    assert new["del seed=0 evaluate"]["after"] == [new["del seed=0 train"]["id"]]
    assert new["tables"]["after"] == [new["del seed=0 publish"]["id"]]


class _Waiting(Executor):
    """A waiting executor (submitit's local one has no dependencies): each job ends at once, as scripted."""

    name, waits = "fake_local", True

    def __init__(self, fail: set[str]):
        self.fail, self.order, self.st = fail, [], {}

    def submit(self, stage: Stage, after_ids):
        assert after_ids == []  # the waiting executor gets no dependency: it was already waited for
        self.order.append(stage.key)
        jid = str(len(self.order))
        self.st[jid] = FAILED if stage.key in self.fail else DONE
        return jid

    def status(self, job_id):
        return self.st.get(job_id, FAILED)

    def wait(self, job_id, poll_s=0):
        return self.status(job_id)


def test_with_a_waiting_executor_a_failure_stops_its_own_chain_only(tmp_path):
    stages = stage_graph(_jobs(tmp_path), TRAIN, EVAL, PUB, tables_argv=["py", "tables"])
    ex = _Waiting(fail={"del seed=0 train"})
    out = submit_graph(stages, ex, State(tmp_path / "s.json"), say=lambda m: None)
    assert "del seed=0 evaluate" not in ex.order and "mle seed=0 publish" in ex.order
    assert out.failed == ["del seed=0 train"]
    assert out.blocked == ["del seed=0 evaluate", "del seed=0 publish", "tables"]
    ex.fail = set()  # the rerun: only the failed chain is submitted
    ex.order.clear()
    out = submit_graph(stages, ex, State(tmp_path / "s.json"), say=lambda m: None)
    assert ex.order == ["del seed=0 train", "del seed=0 evaluate", "del seed=0 publish", "tables"]
    assert not out.failed and not out.blocked


def test_a_damaged_state_file_is_one_line(tmp_path):
    f = tmp_path / "s.json"
    f.write_text("{")
    with pytest.raises(ValueError, match="not a pipeline state file"):
        State(f)


@pytest.mark.parametrize("preset", PAPER)
def test_plan_on_every_paper_preset_matches_the_preset_and_submits_nothing(preset, tmp_path, capsys):
    from numlearn.cli import preset_config

    cfg = preset_config(preset, config="evaluate")
    world, tp = int(cfg.paper_row.world_size), int(cfg.eval.tensor_parallel_size)
    rc = pipeline.main(["table1", "--experiment", preset, "--rows", "mle,del", "--selected", "none", "--seeds", "1",
                        "--executor", "slurm", "--plan", "--outputs", str(tmp_path / "out"),
                        "--store", str(tmp_path / "store"), "--out", str(tmp_path / "t"),
                        "--gpu-check", str(tmp_path / "no_gpu_check.json")])
    text = capsys.readouterr().out
    assert rc == 0 and "nothing submitted" in text
    assert re.search(rf"del seed=0 train  \[1 node x {world} GPU, {world} task\(s\)", text), text
    assert re.search(rf"del seed=0 evaluate  \[1 node x {tp} GPU, 1 task\(s\).*after: del seed=0 train", text), text
    assert "tables  [" in text and "after: mle seed=0 publish, del seed=0 publish" in text
    fast, slow = map(float, re.search(r"GPU-hours: ([\d.]+) to ([\d.]+) \(6 x ", text).groups())
    assert 0 < fast < slow and "35% to 10% MFU of an H100's 989 bf16 TFLOP/s (estimate, not measured" in text
    assert not (tmp_path / "out").exists()  # no state file, no job folder


def _plan_hours(tmp_path, capsys, *extra) -> tuple[float, str]:
    rc = pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--rows", "mle", "--selected", "none",
                        "--seeds", "1", "--executor", "slurm", "--plan", "--outputs", str(tmp_path / "o"),
                        "--store", str(tmp_path / "s"), *extra])
    text = capsys.readouterr().out
    assert rc == 0, text
    return float(re.search(r"GPU-hours: ([\d.]+)", text).group(1)), text


def test_plan_takes_its_training_rate_from_the_gpu_check_once_one_exists(tmp_path, capsys):
    """Issue 46 item 3: with experiments/gpu_check.sh's summary.json, --plan's training hours come from the measured
    rate (6 x params x tokens/s per GPU), and the plan says so; a dry-run summary is not a measurement. By hand, for
    the Qwen2.5-1.5B row (1.54B params, 262,040 x 350 tokens x 2 epochs, 4 GPUs): at 35 % MFU of 989 TFLOP/s
    a training takes 6 x 1.54e9 x 1.8343e8 / (4 x 3.4615e14) / 3600 = 0.340 h; measured at 1.54B params and
    18,720 tokens/s on one GPU (1.7297e14 FLOP/s, half the assumed rate) it takes twice that, 0.680 h."""
    base, text = _plan_hours(tmp_path, capsys, "--gpu-check", str(tmp_path / "absent.json"))
    train_h = float(re.search(r"\(([\d.]+) to [\d.]+ h on 4 GPUs\)", text).group(1))
    assert train_h == pytest.approx(0.340, abs=0.001) and "estimate, not measured" in text
    summary = {"check": "gpu_check", "dry_run": False, "device": "NVIDIA H100 80GB HBM3", "created": "2026-12-06",
               "train": {"mle": {"n_params": 1.54e9, "world_size": 1, "steady": {"tokens_per_s": 18720.0}}}}
    f = tmp_path / "summary.json"
    f.write_text(json.dumps(summary))
    hours, text = _plan_hours(tmp_path, capsys, "--gpu-check", str(f))
    assert float(re.search(r"\(([\d.]+) h on 4 GPUs\)", text).group(1)) == pytest.approx(0.680, abs=0.001)
    assert "measured by experiments/gpu_check.sh on NVIDIA H100 80GB HBM3" in text and "173 TFLOP/s" in text
    eval_gpu_h = base - 4 * train_h  # the evaluation's share did not change (the plan prints one decimal)
    assert hours == pytest.approx(4 * 0.680 + eval_gpu_h, abs=0.1)
    f.write_text(json.dumps({**summary, "dry_run": True}))  # a CPU dry run measures nothing
    assert "estimate, not measured" in _plan_hours(tmp_path, capsys, "--gpu-check", str(f))[1]
    f.write_text("{")  # a damaged file: one line naming it and the fix, no plan
    assert pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--rows", "mle", "--selected", "none",
                          "--executor", "slurm", "--plan", "--gpu-check", str(f)]) == 2
    err = capsys.readouterr().err
    assert "not a gpu_check summary" in err and "experiments/gpu_check.sh" in err


def test_flags_override_the_preset_and_the_job_records_its_resources(monkeypatch, tmp_path, capsys):
    rc = pipeline.main(["table1", "--experiment", "table1_qwen2.5-7b", "--rows", "del", "--selected", "none",
                        "--seeds", "1", "--executor", "slurm", "--plan", "--gpus-per-node", "8", "--timeout-min",
                        "600", "--partition", "h100", "--outputs", str(tmp_path / "o"), "--store", str(tmp_path / "s")])
    text = capsys.readouterr().out
    assert rc == 0 and "del seed=0 train  [1 node x 8 GPU, 8 task(s) x 8 CPU, 512 GB, 600 min, partition h100]" in text
    from numlearn.provenance import provenance

    monkeypatch.setenv("NUMLEARN_JOB_RESOURCES", json.dumps({"gpus_per_node": 8, "stage": "del seed=0 train"}))
    assert provenance()["job_resources"] == {"gpus_per_node": 8, "stage": "del seed=0 train"}


# -- submitit's local executor end to end (the multi-process tier) --------------------------------------------
SHRINK = ["--override", "train.max_steps=6", "--override", "train.save_steps=3", "--override", "eval.limit=4",
          "--override", "eval.teacher_forced.n=8", "--override", "data.n_train=200"]


def _argv(tmp_path, *extra):
    return ["table1", "--experiment", "table1_tiny", "--rows", "mle,del", "--selected", "none",
            "--executor", "submitit_local", "--tasks-per-node", "2", "--jobs", "2", "--outputs", str(tmp_path / "out"),
            "--store", str(tmp_path / "store"), "--out", str(tmp_path / "tables"), "--live", "off", *extra]


@pytest.mark.distributed
def test_table1_through_submitit_local_builds_the_table_and_a_rerun_submits_nothing(tmp_path, capsys):
    """The issue's command, shrunk: 2 rows x 2 seeds, each training 2 processes (one rank each), evaluated,
    published and tabulated as dependent jobs; the same command again finds everything done."""
    assert pipeline.main(_argv(tmp_path, "--seeds", "2", *SHRINK)) == 0
    table = (tmp_path / "tables" / "table1.md").read_text()
    assert re.search(r"^\| tiny \| mle \| 2 \|", table, flags=re.M) and re.search(r"^\| tiny \| del \| 2 \|", table,
                                                                                 flags=re.M), table
    runs = sorted((tmp_path / "out").rglob("run.json"))
    metas = [json.loads(p.read_text()) for p in runs]
    assert len(metas) == 4 and {m["world_size"] for m in metas} == {2}
    assert {m["job_resources"]["executor"] for m in metas} == {"submitit_local"}
    assert all(m["job_resources"]["tasks_per_node"] == 2 for m in metas)
    capsys.readouterr()
    assert pipeline.main(_argv(tmp_path, "--seeds", "2", "--reuse", *SHRINK)) == 0
    err = capsys.readouterr().err
    assert "0 submitted, 0 resubmitted" in err, err


@pytest.mark.distributed
def test_a_training_killed_mid_run_is_resubmitted_and_resumes_from_its_checkpoint(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    longer = [x.replace("train.max_steps=6", "train.max_steps=40") for x in SHRINK]
    cmd = [sys.executable, "-m", "numlearn.pipeline", *_argv(tmp_path, "--seeds", "1", "--rows", "del"), *longer]
    cmd[cmd.index("mle,del")] = "del"
    p = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    ckpt = None
    while time.time() < deadline and ckpt is None:
        ckpt = next(iter((tmp_path / "out").rglob("checkpoint-*/trainer_state.json")), None)
        time.sleep(0.5)
    assert ckpt is not None, "no checkpoint within 5 minutes"
    state = tmp_path / "out" / "pipeline" / "table1_tiny.submitit_local.state.json"
    job_id = json.loads(state.read_text())["jobs"]
    train_id = next(v["id"] for k, v in job_id.items() if k.endswith(" train"))
    os.killpg(p.pid, signal.SIGKILL)  # the pipeline
    for pid in {int(train_id)}:  # the submitted training (its own process group: submitit's local job)
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()
    time.sleep(1)
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"del\S* seed=0 train: job \d+ failed: resubmitted", r.stderr), r.stderr[-3000:]
    (run_json,) = (tmp_path / "out").rglob("run.json")
    meta = json.loads(run_json.read_text())
    assert meta["status"] == "complete" and meta["resumed_from"] and "checkpoint-" in meta["resumed_from"]


def test_released_plan_gives_each_checkpoint_its_own_presets_gpus(capsys, tmp_path):
    from numlearn.cli import preset_config

    assert pipeline.main(["released", "--with-base", "--executor", "slurm", "--plan", "--outputs",
                          str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    tp = int(preset_config("table1_qwen2.5-7b", config="evaluate").eval.tensor_parallel_size)
    assert re.search(rf"qwen2.5-7b released evaluate  \[1 node x {tp} GPU", text), text
    assert "qwen2.5-7b base publish" in text and "after: qwen2.5-7b base evaluate" in text
    assert text.count(" evaluate  [") == 10 and not (tmp_path / "o").exists()


def test_a_zombie_job_process_is_failed_not_running(tmp_path):
    """CI run of c3e9360: a training killed after its pipeline was still a zombie (not yet reaped) when the
    re-run asked; kill(pid, 0) answered, the job read as running and was waited on instead of resubmitted (under
    an init that never reaps, for ever). A zombie is dead; a live process and a missing one are told apart too."""
    import subprocess
    import sys
    import time

    pytest.importorskip("submitit")
    from numlearn.executors import SubmititExecutor, pid_alive

    ex = SubmititExecutor("local", tmp_path)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; unreaped until wait(): a zombie
    try:
        deadline = time.time() + 10
        while time.time() < deadline and pid_alive(gone.pid):
            time.sleep(0.05)
        assert open(f"/proc/{gone.pid}/stat").read().split(")")[-1].split()[0] == "Z"  # still there, a zombie
        assert (ex.status(str(live.pid)), ex.status(str(gone.pid))) == (RUNNING, FAILED)
    finally:
        live.kill()
        live.wait()
        gone.wait()
    assert ex.status(str(gone.pid)) == FAILED and not pid_alive(gone.pid)


# -- issue 60: a finished job reads as finished, a failure does not strand its dependants, a plan runs nothing --
def _results(folder, job_id, outcomes, tasks):
    import pickle

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job_id}.numlearn.json").write_text(json.dumps({"tasks": tasks}))
    for t, o in enumerate(outcomes):
        if o is not None:
            with open(folder / f"{job_id}_{t}_result.pkl", "wb") as f:
                pickle.dump((o, 0 if o == "success" else "Traceback ..."), f)


def test_a_finished_multi_task_job_reads_as_finished_from_a_new_process(tmp_path):
    """A new orchestrator asks for an earlier 2-task training by id: each task's result is read (submitit's
    meta-job asserts there, which a bare except turned into FAILED and a resubmission)."""
    from numlearn.executors import SubmititExecutor

    pytest.importorskip("submitit")
    folder = tmp_path / "submitit"
    _results(folder, "4242", ["success", "success"], tasks=2)
    _results(folder, "4243", ["success", "error"], tasks=2)
    ex = SubmititExecutor("slurm", folder)  # nothing submitted by this process
    assert ex.status("4242") == DONE and ex.status("4243") == FAILED
    dead = subprocess.Popen(["true"])
    dead.wait()
    _results(folder, str(dead.pid), ["success", None], tasks=2)  # task 1 never wrote, its process is gone
    assert SubmititExecutor("local", folder).status(str(dead.pid)) == FAILED
    (folder / "4244_0_result.pkl").write_bytes(b"not a pickle")
    (folder / "4244.numlearn.json").write_text(json.dumps({"tasks": 1}))
    with pytest.raises(ExecutorError, match=r"4244_0_result.pkl: the result of task 0 of job 4244 cannot be read"):
        ex.status("4244")  # never swallowed into a status


def test_a_rerun_after_the_orchestrator_died_resubmits_nothing_that_finished(tmp_path):
    from numlearn.executors import SubmititExecutor

    pytest.importorskip("submitit")
    folder = tmp_path / "submitit"
    stages = stage_graph(_jobs(tmp_path)[:1], TRAIN, EVAL, PUB)
    state = State(tmp_path / "s.json")
    for i, st in enumerate(stages):  # the first orchestrator submitted all, then died; every job finished
        state.record(st.key, str(7000 + i), "slurm")
        _results(folder, str(7000 + i), ["success"] * st.resources.tasks_per_node, st.resources.tasks_per_node)
    out = submit_graph(stages, SubmititExecutor("slurm", folder), State(tmp_path / "s.json"), say=lambda m: None)
    assert out.resubmitted == [] and out.submitted == [] and sorted(out.done) == sorted(st.key for st in stages)


class _SlurmDefault(RecordingExecutor):
    """SLURM's default: a job whose afterok dependency failed stays PENDING for ever (DependencyNeverSatisfied)."""

    def status(self, job_id):
        return self.states.get(job_id, PENDING)


def test_a_failed_trainings_pending_dependants_are_cancelled_and_resubmitted(tmp_path):
    stages = stage_graph(_jobs(tmp_path)[:1], TRAIN, EVAL, PUB)
    ex = _SlurmDefault(tmp_path / "plan")
    submit_graph(stages, ex, State(tmp_path / "s.json"), say=lambda m: None)
    first = {s["key"]: s["id"] for s in ex.submitted}
    train = next(k for k in first if k.endswith("train"))
    ex.states[first[train]] = FAILED  # the training failed; its dependants stay PENDING, as SLURM leaves them
    said = []
    out = submit_graph(stages, ex, State(tmp_path / "s.json"), say=said.append)
    again = {s["key"]: s for s in ex.submitted[len(first):]}
    assert set(again) == set(first)  # the training and every dependant, none left waiting on the dead job
    assert sorted(ex.cancelled) == sorted(v for k, v in first.items() if k != train)
    evaluate = next(k for k in again if "evaluate" in k)
    assert again[evaluate]["after"] == [again[train]["id"]]
    assert again[evaluate]["params"]["additional_parameters"] == {"kill-on-invalid-dep": "yes"}
    assert "waited on" in " ".join(said) and out.running == []


@pytest.mark.parametrize("study", ["ablation", "sweep", "pretrained", "chunked"])
def test_a_study_without_a_cluster_path_refuses_executor_and_plan_and_starts_nothing(study, cli, tmp_path):
    r = cli("numlearn.pipeline", [study, "--executor", "slurm", "--plan", "--outputs", str(tmp_path / "out")])
    assert r.returncode == 2 and "nothing was started" in r.stderr and "table1 --rows" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.long  # the default tier's time (make test-distributed and CI run it)
def test_table1_tables_for_the_sweeps_seeds_refuses_in_one_line_and_writes_nothing(cli, tmp_path):
    """Issue 66 item 1: make help's example (TABLE1_SEEDS=0,1,2) ended in pandas' message after rewriting the
    committed tables; the val-chosen rows have no fresh seed there. One line naming the fix; nothing written."""
    out = tmp_path / "tables"
    r = cli("numlearn.pipeline", ["tables", "--seeds", "0,1,2", "--out", str(out)])
    assert r.returncode == 2 and not out.exists()
    assert "is a seed the weight selection trained (0,1,2), so its verdict has no fresh seed" in r.stderr
    assert "Columns must be same length" not in r.stderr
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^TABLE1_OUT \?= outputs/", make, flags=re.M)  # a user's tables never over the committed


def test_the_state_file_has_a_lock_a_second_orchestrator_stops_in_one_line(tmp_path):
    import multiprocessing

    first = State(tmp_path / "s.json").lock()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()

    def second():
        try:
            State(tmp_path / "s.json").lock()
            q.put("locked")
        except ExecutorError as e:
            q.put(str(e))

    p = ctx.Process(target=second)
    p.start()
    p.join(30)
    said = q.get(timeout=5)
    assert "is held by another orchestrator" in said and "run the same command again" in said
    assert first._lock is not None


def test_a_sigterm_to_the_orchestrator_stops_its_jobs_as_ctrl_c_does(tmp_path):
    """Issue 60 item 3: the local job's process group is stopped, exit 130, nothing orphaned."""
    import os
    import signal
    import sys
    import time

    marker = tmp_path / "child.pid"
    code = (f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(120)")
    orchestrator = subprocess.Popen([sys.executable, "-c", (
        "import sys\n"
        "from numlearn import pipeline\n"
        "from numlearn.jobs import Job, run_jobs\n"
        "pipeline._stop_on_sigterm()\n"
        f"from pathlib import Path\njob = Job('sleeper', [('train', [sys.executable, '-c', {code!r}])], Path({str(tmp_path / 'j.log')!r}))\n"
        "try:\n    run_jobs([job], 1, live=False)\nexcept KeyboardInterrupt:\n    sys.exit(130)\n")])
    for _ in range(100):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.2)
    child = int(marker.read_text())
    orchestrator.send_signal(signal.SIGTERM)
    assert orchestrator.wait(30) == 130
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the job's process {child} outlived the orchestrator")


def test_the_gpu_check_keeps_what_it_measured_when_a_step_times_out(tmp_path):
    """Issue 60 item 8: the summary is written after every step; a step that times out is recorded as such
    (its command and limit), the steps that need it are skipped and say why, and the others still run."""
    import importlib.util
    import subprocess

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "experiments" / "gpu_check.py")
    gc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gc)
    s = gc.Summary(tmp_path / "summary.json", check="gpu_check")
    assert s.step("train_mle", lambda: {"tokens_per_s": 1000.0}) == {"tokens_per_s": 1000.0}
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["train_mle"] == {"tokens_per_s": 1000.0} and on_disk["steps"] == {"train_mle": "ok"}

    def hang():
        raise subprocess.TimeoutExpired(["accelerate", "launch", "numlearn.train", "loss=del"], 210)

    assert s.step("train_del", hang) is None
    assert s.step("generation", lambda: pytest.fail("must not run"), "train_del") is None
    assert s.step("loss_stage", lambda: {"rc": 0}) == {"rc": 0}
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["steps"] == {"train_mle": "ok", "train_del": "timed out after 210 s",
                                "generation": "skipped: train_del did not end ok", "loss_stage": "ok"}
    assert on_disk["train_del"]["status"] == "timed out" and "loss=del" in on_disk["train_del"]["command"]
    assert on_disk["train_mle"] == {"tokens_per_s": 1000.0}  # measured before the timeout: kept
    assert s.step("probe", lambda: (_ for _ in ()).throw(SystemExit("gpu_check: probe failed"))) is None
    assert json.loads((tmp_path / "summary.json").read_text())["probe"]["error"] == "gpu_check: probe failed"
    assert gc._cost({"mle": None, "del": None}) == {}


def test_plan_after_a_submission_shows_what_is_done_running_and_left(tmp_path, capsys, monkeypatch):
    """Issue 60 item 3: the same command with --plan reads the state file and asks the scheduler (reads only):
    each job's state, and a count of done, running or pending, failed, not submitted and unknown."""
    from numlearn import executors as ex

    out = tmp_path / "out"
    state = ex.State(out / "pipeline" / "table1_qwen2.5-1.5b.slurm.state.json")
    state.record("mle seed=0 train", "111", "slurm")
    state.record("mle seed=0 evaluate", "222", "slurm")
    state.record("mle seed=0 publish", "333", "slurm")

    def status(self, job_id):
        if job_id == "333":
            raise RuntimeError("sacct: command not found")
        return {"111": ex.DONE, "222": ex.RUNNING}[job_id]

    monkeypatch.setattr(ex.SubmititExecutor, "status", status)
    monkeypatch.setattr(ex.SubmititExecutor, "submit", lambda *a, **k: pytest.fail("--plan submits nothing"))
    rc = pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--rows", "mle", "--seeds", "1",
                        "--executor", "slurm", "--plan", "--outputs", str(out), "--store", str(tmp_path / "s"),
                        "--out", str(tmp_path / "t")])
    text = capsys.readouterr().out
    assert rc == 0 and "nothing submitted" in text
    assert re.search(r"mle seed=0 train  \[.*-- COMPLETED \(job 111, submitted ", text), text
    assert re.search(r"mle seed=0 evaluate  \[.*-- RUNNING \(job 222", text), text
    assert re.search(r"mle seed=0 publish  \[.*-- unknown \(RuntimeError: sacct: command not found\) \(job 333", text)
    assert re.search(r"tables  \[.*-- not submitted", text), text
    assert "state: 1 done, 1 running or pending, 0 failed, 1 not submitted, 1 unknown" in text


def test_plan_prints_commands_sbatch_lines_logs_limits_disk_and_the_utilisation_range(tmp_path, capsys):
    """Issue 60 items 5 and 7: with a site's cluster file, --plan prints each job's command, log and submitit's
    sbatch lines (account, qos, constraint, exclude, setup; a 0-GPU job on the CPU partition), the state file, a
    training time limit from the estimate's slow end x the margin, GPU-hours over 35 % to 10 % MFU, the critical
    path and the disk. By hand for Qwen2.5-1.5B (1.54B params, 262,040 x 350 tokens x 2 epochs, 4 GPUs): at 10 % MFU
    a training takes 6 x 1.54e9 x 1.83428e8 / (4 x 9.89e13) / 3600 = 1.190 h, x 1.5 = 107.1 -> 108 min; disk
    1.54e9 x (16 x 2 + 2) B = 52 GB per run."""
    site = tmp_path / "site.yaml"
    site.write_text("account: proj42\nqos: high\nconstraint: h100\nexclude: node7\ncpu_partition: cpu\n"
                    "partition: gpu\nsetup: ['module load cuda/12.4']\n")
    rc = pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--rows", "mle", "--selected", "none",
                        "--seeds", "1", "--executor", "slurm", "--plan", "--cluster", str(site),
                        "--outputs", str(tmp_path / "o"), "--store", str(tmp_path / "s"),
                        "--gpu-check", str(tmp_path / "absent.json")])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert f"state: {tmp_path / 'o' / 'pipeline'}" in text and "$ " in text and "-m numlearn.train" in text
    train = text[text.index("mle seed=0 train  ["):text.index("mle seed=0 evaluate  [")]
    for line in ("#SBATCH --account=proj42", "#SBATCH --qos=high", "#SBATCH --constraint=h100",
                 "#SBATCH --exclude=node7", "#SBATCH --partition=gpu", "#SBATCH --time=108", "module load cuda/12.4"):
        assert line in train, (line, train)
    assert "108 min" in train
    publish = text[text.index("mle seed=0 publish  ["):text.index(" tables  [")]
    assert "#SBATCH --partition=cpu" in publish and "#SBATCH --dependency='afterok:<mle seed=0 evaluate>'" in publish
    fast, slow = map(float, re.search(r"GPU-hours: ([\d.]+) to ([\d.]+) \(", text).groups())
    t_fast, t_slow = map(float, re.search(r"\(([\d.]+) to ([\d.]+) h on 4 GPUs\)", text).groups())
    assert (t_fast, t_slow) == (pytest.approx(0.340, abs=0.005), pytest.approx(1.190, abs=0.005))  # 35 % / 10 %
    assert slow - fast == pytest.approx(4 * (t_slow - t_fast), abs=0.1)  # the evaluation's share is one number
    assert re.search(r"critical path: [\d.]+ to [\d.]+ h wall-clock", text)
    assert "disk: ~52 GB per training run (2 checkpoint(s)" in text
    # a paper preset's table goes to its own directory, never onto the tiny table committed in results/table1_tiny
    assert "--out results/table1_qwen2.5-1.5b " in text and "results/table1_tiny" not in text


def test_a_misspelt_cluster_key_or_an_unknown_cluster_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("acount: proj42\n")
    for arg, said in ((str(bad), "acount"), ("nosuchsite", "conf/cluster/")):
        rc = pipeline.main(["table1", "--experiment", "table1_qwen2.5-1.5b", "--rows", "mle", "--selected", "none",
                            "--executor", "slurm", "--plan", "--cluster", arg, "--outputs", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, err
