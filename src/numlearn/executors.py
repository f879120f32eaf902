"""Where a study's jobs run: this machine's worker pool (``local``, ``numlearn.jobs``), submitit's local
executor (``submitit_local``: the SLURM code path, run here on CPU) or SLURM (``slurm``) through submitit.

A (row, seed) is a chain of **stages**: ``train`` (one job, one task per GPU: each task one rank, as
``conf/hydra/launcher/slurm_fsdp_*.yaml`` sets up), each ``evaluate`` (a job that depends on the training,
``afterok``, with the GPUs ``eval.tensor_parallel_size`` names), ``publish`` (its result files into the store);
a study's ``tables`` stage depends on every publish. Each stage's resources come from the preset, are
overridable, and travel to the process in ``NUMLEARN_JOB_RESOURCES``, which ``run.json`` and ``result.json``
record (``numlearn.provenance``).

**Resumable across days.** A state file (``<outputs>/pipeline/<study>.state.json``) records every submitted
stage's job id. Running the same command again skips what the store already holds (planning's ``--reuse``),
leaves running and pending jobs alone (asked through the executor), resubmits only what failed -- naming it
-- and never submits a stage twice. A resubmitted training resumes from the run dir's last checkpoint.

**A plan before any GPU hour.** ``plan_text`` prints the stages, their dependencies, their resources and an
estimate of GPU-hours, and submits nothing.

submitit is an optional extra (``pip install -e '.[slurm]'``), imported only when a submitit executor is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

EXECUTORS = ("local", "submitit_local", "slurm")
DONE, RUNNING, PENDING, FAILED = "COMPLETED", "RUNNING", "PENDING", "FAILED"
_SLURM_RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "RESIZING", "SUSPENDED"}
_SLURM_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}


class ExecutorError(ValueError):
    """A submission that cannot proceed: one line naming the problem and the fix."""


@dataclass(frozen=True)
class Resources:
    """One job's request. ``tasks_per_node``: processes (training: one per GPU, each a rank)."""

    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    mem_gb: int | None = None
    timeout_min: int = 60
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    setup: tuple[str, ...] = ()

    def with_overrides(self, **kw) -> Resources:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def on_cluster(self, cluster) -> Resources:
        """This request with a site's ``ClusterConfig`` (account, qos, constraint, exclude, setup lines; a job without
        GPUs on its ``cpu_partition``, one with GPUs on its ``partition``); a partition already set wins."""
        partition = self.partition or (cluster.partition if self.gpus else (cluster.cpu_partition or cluster.partition))
        return replace(self, partition=partition, account=cluster.account, qos=cluster.qos,
                       constraint=cluster.constraint, exclude=cluster.exclude, setup=tuple(cluster.setup))

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def slurm(self) -> dict:
        """The parameters of ``submitit.SlurmExecutor.update_parameters``."""
        out = {"nodes": self.nodes, "ntasks_per_node": self.tasks_per_node, "cpus_per_task": self.cpus_per_task,
               "time": self.timeout_min}
        if self.gpus_per_node:
            out["gpus_per_node"] = self.gpus_per_node
        if self.mem_gb:
            out["mem"] = f"{self.mem_gb}GB"
        for key in ("partition", "account", "qos", "constraint", "exclude"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.setup:
            out["setup"] = list(self.setup)
        return out


@dataclass
class Stage:
    """One job of the graph: ``key`` (``<row> seed=<s> <stage>``), its command, resources and the keys it
    waits for (``after``: they must end successfully, afterok)."""

    key: str
    argv: list[str]
    resources: Resources
    after: list[str] = field(default_factory=list)
    log: Path | None = None


class Command:
    """A stage's command, run inside the submitted task (picklable): the task's own environment (submitit's
    and SLURM's variables: the rank of a multi-task training) plus ``env``, its output appended to ``log``. A
    non-zero exit raises, so the job fails and its dependants never start."""

    def __init__(self, argv: list[str], env: dict[str, str], log: str | None = None, cwd: str | None = None):
        self.argv, self.env, self.log, self.cwd = list(argv), dict(env), log, cwd

    def __call__(self) -> int:
        rank = os.environ.get("SUBMITIT_LOCAL_GLOBAL_RANK") or os.environ.get("SLURM_PROCID") or "0"
        log = Path(self.log).with_suffix(f".rank{rank}.log") if self.log and rank != "0" else self.log
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if log:
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"\n$ {' '.join(self.argv)}\n")
                f.flush()
                rc = subprocess.run(self.argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=self.cwd).returncode
        else:
            rc = subprocess.run(self.argv, env=env, cwd=self.cwd).returncode
        if rc != 0:
            raise RuntimeError(f"{self.argv[2] if len(self.argv) > 2 else self.argv[0]} exited {rc}"
                               + (f": see {log}" if log else ""))
        return rc


# -- executors ----------------------------------------------------------------------------------------
class Executor:
    """Submits stages and answers for their state. ``waits`` : dependencies are waited for by the caller
    (submitit's local executor has none); otherwise the scheduler holds a dependant (afterok)."""

    name = "base"
    waits = False

    def submit(self, stage: Stage, after_ids: list[str]) -> str:
        raise NotImplementedError

    def status(self, job_id: str) -> str:
        raise NotImplementedError

    def cancel(self, job_id: str) -> None:
        """Cancel a submitted job (where the scheduler would keep it waiting for ever); by default nothing."""


def pid_alive(pid: int | str) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie. A job killed after the pipeline that started it
    stays a zombie until init reaps it (for ever under an init that does not reap, as in a container started
    without one), and a zombie answers ``kill(pid, 0)``: read as running, its job was waited on instead of
    resubmitted."""
    try:
        os.kill(int(pid), 0)
    except PermissionError:
        return True  # another user's process: it exists
    except (OSError, ValueError):
        return False
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): kill(pid, 0) is all there is
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


class SubmititExecutor(Executor):
    """submitit's ``local`` (processes on this machine, one per task) or ``slurm`` executor."""

    def __init__(self, cluster: str, folder: Path):
        try:
            import submitit  # noqa: F401
        except ImportError:
            raise ExecutorError("--executor submitit_local/slurm needs submitit: pip install -e '.[slurm]'") from None
        if cluster not in ("local", "slurm"):
            raise ExecutorError(f"submitit cluster {cluster!r}: local or slurm")
        self.cluster, self.folder = cluster, Path(folder)
        self.name = f"submitit_{cluster}" if cluster == "local" else "slurm"
        self.waits = cluster == "local"
        self._jobs: dict[str, object] = {}

    def _executor(self, stage: Stage, after_ids: list[str]):
        import submitit

        r = stage.resources
        if self.cluster == "local":
            ex = submitit.LocalExecutor(folder=self.folder)
            ex.update_parameters(timeout_min=r.timeout_min, tasks_per_node=r.tasks_per_node, nodes=1,
                                 gpus_per_node=r.gpus_per_node, cpus_per_task=r.cpus_per_task)
            return ex
        ex = submitit.SlurmExecutor(folder=self.folder)
        params = with_dependency(r.slurm(), after_ids)
        ex.update_parameters(job_name=f"numlearn-{stage.key}".replace(" ", "_"), **params)
        return ex

    def cancel(self, job_id: str) -> None:
        """Cancel a job (a dependant left waiting on a dependency that failed)."""
        if self.cluster == "local":
            try:
                os.kill(int(job_id), 15)
            except (ProcessLookupError, ValueError):
                pass
            return
        subprocess.run(["scancel", str(job_id)], check=False, capture_output=True)

    def submit(self, stage: Stage, after_ids: list[str]) -> str:
        env = {"NUMLEARN_JOB_RESOURCES": json.dumps({**asdict(stage.resources), "executor": self.name,
                                                     "stage": stage.key})}
        job = self._executor(stage, after_ids).submit(Command(stage.argv, env, str(stage.log) if stage.log else None,
                                                              os.getcwd()))
        self._jobs[job.job_id] = job
        # how many tasks the job has, for a later process that asks for it by id (each task writes its own result)
        r = stage.resources
        (self.folder / f"{job.job_id}.numlearn.json").write_text(json.dumps({"tasks": r.nodes * r.tasks_per_node,
                                                                              "stage": stage.key}))
        return str(job.job_id)

    def tasks(self, job_id: str) -> int:
        """The job's task count, as its submission recorded it (1 for a job submitted before it was recorded)."""
        f = self.folder / f"{job_id}.numlearn.json"
        try:
            return max(1, int(json.loads(f.read_text())["tasks"]))
        except FileNotFoundError:
            return 1
        except (ValueError, KeyError, TypeError) as e:
            raise ExecutorError(f"{f} is not numlearn's record of job {job_id} ({e}): move it away") from None

    def task_outcomes(self, job_id: str) -> list[str | None]:
        """Each task's outcome from its result file (``success`` / ``error``), None for a task without one yet.
        Read per task: submitit's multi-task ("meta") job refuses to be read that way from another process."""
        import pickle

        out = []
        for t in range(self.tasks(job_id)):
            f = self.folder / f"{job_id}_{t}_result.pkl"
            if not f.exists():
                out.append(None)
                continue
            try:
                with open(f, "rb") as fh:
                    outcome = pickle.load(fh)[0]
            except (EOFError, pickle.UnpicklingError, IndexError, TypeError) as e:
                raise ExecutorError(f"{f}: the result of task {t} of job {job_id} cannot be read ({type(e).__name__}: "
                                    f"{e}); move it away and rerun (the stage is then resubmitted)") from None
            out.append(str(outcome))
        return out

    def status(self, job_id: str) -> str:
        import submitit

        job = self._jobs.get(job_id)
        if job is not None and self.cluster == "local":
            if not job.done():
                return RUNNING
            return DONE if job.exception() is None else FAILED
        outcomes = self.task_outcomes(job_id)
        if any(o is not None and o != "success" for o in outcomes):
            return FAILED
        if all(o == "success" for o in outcomes):
            return DONE
        if self.cluster == "local":  # no result and this process did not submit it: its process (the id) alive?
            return RUNNING if pid_alive(job_id) else FAILED
        state = submitit.SlurmJob(self.folder, job_id).state.split()[0].upper()
        return DONE if state == "COMPLETED" else RUNNING if state in _SLURM_RUNNING else \
            PENDING if state in _SLURM_PENDING or state == "UNKNOWN" else FAILED

    def wait(self, job_id: str, poll_s: float = 1.0) -> str:
        while (st := self.status(job_id)) in (RUNNING, PENDING):
            time.sleep(poll_s)
        return st


def with_dependency(params: dict, after_ids: list[str]) -> dict:
    """``params`` (``Resources.slurm``) with the ``afterok`` dependency on ``after_ids`` and, with one,
    ``--kill-on-invalid-dep=yes``: SLURM's default leaves a dependant of a failed job PENDING for ever
    (DependencyNeverSatisfied); this way it ends, and the rerun resubmits it."""
    if not after_ids:
        return dict(params)
    extra = dict(params.get("additional_parameters") or {})
    extra["kill-on-invalid-dep"] = "yes"
    return {**params, "dependency": "afterok:" + ":".join(after_ids), "additional_parameters": extra}


class RecordingExecutor(Executor):
    """Submits nothing: records each stage's sbatch script (submitit's own rendering), its dependencies and
    the environment the job would get; ``states`` answers ``status`` (tests, and ``--plan``)."""

    name = "recording"

    def __init__(self, folder: Path = Path("/tmp/numlearn-plan")):
        self.folder, self.submitted, self.states = Path(folder), [], {}

    def submit(self, stage: Stage, after_ids: list[str]) -> str:
        from submitit.slurm.slurm import _make_sbatch_string

        params = with_dependency(stage.resources.slurm(), after_ids)
        job_id = str(1000 + len(self.submitted))
        sbatch = _make_sbatch_string(command=" ".join(stage.argv), folder=str(self.folder),
                                     job_name=f"numlearn-{stage.key}".replace(" ", "_"), **params)
        self.submitted.append({"id": job_id, "key": stage.key, "params": params, "after": list(after_ids),
                               "sbatch": sbatch, "argv": list(stage.argv)})
        self.states[job_id] = PENDING
        return job_id

    def status(self, job_id: str) -> str:
        return self.states.get(job_id, FAILED)

    def cancel(self, job_id: str) -> None:
        self.cancelled = [*getattr(self, "cancelled", []), job_id]
        self.states[job_id] = "CANCELLED"


# -- the state file and the submission ------------------------------------------------------------------
class State:
    """``{key: {"id", "executor", "submitted"}}`` in a JSON file, rewritten whole (atomically) after each change."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = None
        try:
            self.jobs: dict[str, dict] = json.loads(self.path.read_text())["jobs"] if self.path.exists() else {}
        except (ValueError, KeyError) as e:
            raise ExecutorError(f"{self.path} is not a pipeline state file ({e}): move it away to start over") from None

    def lock(self) -> State:
        """Hold the state file's lock (``flock`` on ``<state>.lock``) for this process's submissions: a second
        orchestrator of the same study stops in one line instead of submitting every stage twice. Released when
        the process ends."""
        import fcntl

        if self._lock is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ExecutorError(f"{self.path} is held by another orchestrator (pid {holder}): wait for it, or stop "
                                "it, then run the same command again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock = fd
        return self

    def unlock(self) -> None:
        """Release the lock (the command's submissions are done)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> State:
        return self.lock()

    def __exit__(self, *exc) -> None:
        self.unlock()

    def record(self, key: str, job_id: str, executor: str) -> None:
        self.jobs[key] = {"id": job_id, "executor": executor, "submitted": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"jobs": self.jobs}, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.path)


@dataclass
class Outcome:
    submitted: list[str] = field(default_factory=list)
    resubmitted: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # ended in failure this time (waiting executors)
    blocked: list[str] = field(default_factory=list)  # a stage they wait for failed


def _depth_order(stages: list[Stage]) -> list[Stage]:
    """Every training first, then the evaluations, ... (stable): a waiting executor starts the roots at once."""
    depth: dict[str, int] = {}
    for st in stages:
        depth[st.key] = 1 + max((depth.get(k, 0) for k in st.after), default=-1)
    return sorted(stages, key=lambda st: depth[st.key])


def submit_graph(stages: list[Stage], executor: Executor, state: State, say=print, max_running: int = 0) -> Outcome:
    """Submit ``stages`` (dependencies first) once each: a stage the state file holds is left alone while its job
    runs, waits or has completed, and resubmitted (named) when it failed. With a waiting executor the
    dependants are submitted as their dependencies end, at most ``max_running`` jobs at once (0: no limit), and
    the call returns when every stage has ended."""
    out, ids, status = Outcome(), {}, {}

    def settle(k: str) -> None:
        status[k] = executor.wait(ids[k])
        (out.done if status[k] == DONE else out.failed).append(k)

    renewed: set[str] = set()  # stages submitted anew in this pass: a dependant waiting on their old job is stale
    for st in (_depth_order(stages) if executor.waits else stages):
        if (rec := state.jobs.get(st.key)) is not None:
            s = executor.status(rec["id"])
            if s == DONE:
                out.done.append(st.key)
                ids[st.key], status[st.key] = rec["id"], DONE
                continue
            stale = [k for k in st.after if k in renewed]
            if s in (RUNNING, PENDING) and not (stale and s == PENDING):
                say(f"[{executor.name}] {st.key}: job {rec['id']} {s.lower()}: not submitted again")
                out.running.append(st.key)
                ids[st.key], status[st.key] = rec["id"], s
                continue
            if s == PENDING:  # it waits on a job that failed and was resubmitted: it would wait for ever
                executor.cancel(rec["id"])
                say(f"[{executor.name}] {st.key}: job {rec['id']} waited on {', '.join(stale)}'s failed job: "
                    "cancelled and resubmitted")
            else:
                say(f"[{executor.name}] {st.key}: job {rec['id']} failed: resubmitted")
            out.resubmitted.append(st.key)
        if any(status.get(k) == FAILED for k in st.after):
            out.blocked.append(st.key)
            status[st.key] = FAILED
            continue
        if executor.waits:  # submitit's local executor has no dependencies: the dependencies end first
            for k in st.after:
                if status.get(k) in (RUNNING, PENDING):
                    settle(k)
            while max_running and sum(v in (RUNNING, PENDING) for v in status.values()) >= max_running:
                live = [k for k, v in status.items() if v in (RUNNING, PENDING)]
                done = [k for k in live if executor.status(ids[k]) not in (RUNNING, PENDING)]
                for k in done:
                    settle(k)
                if not done:
                    time.sleep(0.5)
            if any(status.get(k) == FAILED for k in st.after):
                out.blocked.append(st.key)
                status[st.key] = FAILED
                continue
        after_ids = [] if executor.waits else [ids[k] for k in st.after if status.get(k) != DONE]
        job_id = executor.submit(st, after_ids)
        renewed.add(st.key)
        state.record(st.key, job_id, executor.name)
        ids[st.key], status[st.key] = job_id, PENDING
        if st.key not in out.resubmitted:
            out.submitted.append(st.key)
        say(f"[{executor.name}] {st.key}: submitted as job {job_id}"
            + (f" (after {', '.join(after_ids)})" if after_ids else ""))
    if executor.waits:
        for k, v in list(status.items()):
            if v in (RUNNING, PENDING):
                settle(k)
    return out


# -- the graph of a study and its plan --------------------------------------------------------------------
def stage_graph(jobs, train_res: Resources, eval_res: Resources, publish_res: Resources,
                tables_argv: list[str] | None = None) -> list[Stage]:
    """The stages of pipeline jobs (``numlearn.jobs.Job``, steps train, evaluate..., publish): each evaluation
    after the training, the publish after every evaluation, the tables after every publish."""
    stages: list[Stage] = []
    publishes: list[str] = []
    for job in jobs:
        train_key, eval_keys = None, []
        for phase, argv in job.steps:
            kind, key = phase.split()[0], f"{job.name} {phase}"
            if kind == "train":
                stages.append(Stage(key, list(argv), train_res, [], job.log))
                train_key = key
            elif kind == "evaluate":
                stages.append(Stage(key, list(argv), eval_res, [train_key] if train_key else [], job.log))
                eval_keys.append(key)
            else:
                stages.append(Stage(key, list(argv), publish_res, eval_keys or ([train_key] if train_key else []),
                                    job.log))
                publishes.append(key)
    if tables_argv:
        stages.append(Stage("tables", list(tables_argv), publish_res, publishes))
    return stages


H100_BF16_FLOPS = 989e12  # dense bf16 peak of one H100 SXM


def evaluation_hours(params_b: float, gpus: int) -> float:
    """One evaluation's wall hours on ``gpus`` GPUs: ~1 GPU-hour per 7B parameters for the seven benchmarks with
    vLLM (estimate, not measured; the teacher-forced pass is added by the caller that has one)."""
    return float(params_b) / 7.0 / max(int(gpus), 1)


def paper_estimate(cfg, gpus: int, tp: int, gpu_check: Path | None) -> Estimate:
    """A paper preset's ``Estimate`` (``paper_row``: params, examples, tokens per example): one training's wall hours
    at 6 x params x tokens over its GPUs, at the GPU check's measured rate or over ``MFU_RANGE`` of an H100; one
    evaluation's (~1 GPU-hour per 7B parameters for the seven benchmarks with vLLM, plus the teacher-forced pass,
    2 x params x its tokens, on the evaluation's GPUs); the checkpoint disk and the download. A preset without
    ``paper_row.params_b`` (the CPU presets) has no estimate."""
    pr = cfg.get("paper_row") or {}
    if not (pr.get("params_b") and gpus):
        return Estimate(basis="no estimate: the preset declares no paper_row.params_b")
    params = float(pr.params_b) * 1e9
    tokens = float(pr.train_examples) * float(pr.tokens_per_example) * float(cfg.train.num_train_epochs)
    measured = measured_train_flops(gpu_check) if gpu_check else None
    rates = (measured[0], measured[0]) if measured else (H100_BF16_FLOPS * MFU_RANGE[1], H100_BF16_FLOPS * MFU_RANGE[0])
    train_h = tuple(6.0 * params * tokens / (gpus * r) / 3600 for r in rates)
    tf = cfg.eval.get("teacher_forced")
    tf_tokens = int(tf.n) * float(pr.tokens_per_example) if tf else 0.0
    tf_h = 2.0 * params * tf_tokens / (max(tp, 1) * rates[1]) / 3600
    eval_h = evaluation_hours(pr.params_b, tp) + tf_h
    rate = (f"the measured rate, {rates[0] / 1e12:.0f} TFLOP/s per GPU (the same utilisation assumed at {pr.params_b}B)"
            f" -- {measured[1]}" if measured else
            f"{MFU_RANGE[1]:.0%} to {MFU_RANGE[0]:.0%} MFU of an H100's {H100_BF16_FLOPS / 1e12:.0f} bf16 TFLOP/s "
            "(estimate, not measured: experiments/gpu_check.sh's results/gpu_check/summary.json replaces it)")
    span = f"{train_h[0]:.2f}" + (f" to {train_h[1]:.2f}" if train_h[1] != train_h[0] else "")
    basis = (f"6 x {pr.params_b}B params x {tokens / 1e6:.0f}M tokens per training ({span} h on {gpus} GPUs) at "
             f"{rate}; ~1 GPU-hour per 7B parameters per evaluation with vLLM, plus the teacher-forced pass over "
             f"{int(tf.n) if tf else 0} solutions on its GPUs ({tf_h * 60:.1f} min at the slow rate) (estimate, not "
             "measured)")
    keep = int(cfg.train.get("save_total_limit") or 1)
    per_run = params * (16.0 * keep + 2.0) / 1e9  # checkpoints with fp32 Adam state and master weights, bf16 final
    disk = (f"~{per_run:.0f} GB per training run ({keep} checkpoint(s) x 16 B/param with optimiser state, plus the "
            f"bf16 final model); the model's download ~{params * 2 / 1e9:.0f} GB (bf16) once (estimate, not measured)")
    return Estimate(train_h, eval_h, basis, disk)


def measured_train_flops(summary: Path) -> tuple[float, str] | None:
    """Training FLOP/s per GPU that ``experiments/gpu_check.sh`` measured (its ``summary.json``): 6 x the MLE run's
    parameters x its steady tokens/s (after the first logging interval) / its world size, with a line saying where
    it comes from. None without a file, for a dry run, or without a steady-state measurement."""
    import json

    if not summary.is_file():
        return None
    try:
        s = json.loads(summary.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{summary}: not a gpu_check summary ({e}); rerun experiments/gpu_check.sh or pass "
                         "--gpu-check with another file") from None
    run = (s.get("train") or {}).get("mle") or {}
    tokens_per_s, params = (run.get("steady") or {}).get("tokens_per_s"), run.get("n_params")
    if s.get("dry_run") or not tokens_per_s or not params:
        return None
    flops = 6.0 * float(params) * float(tokens_per_s) / float(run.get("world_size") or 1)
    return flops, (f"measured by experiments/gpu_check.sh on {s.get('device', 'an unnamed device')} "
                   f"({s.get('created', 'undated')}): MLE at {float(params) / 1e9:.2f}B params ran {tokens_per_s:,.0f} "
                   f"tokens/s, {flops / 1e12:.0f} TFLOP/s per GPU ({flops / H100_BF16_FLOPS:.0%} of an H100's bf16 "
                   f"peak); {summary}")


def state_view(state: State, executor: Executor) -> dict[str, str]:
    """Issue 60 item 3: stage key -> what the state file and the scheduler say of it (``COMPLETED (job 123,
    submitted ...)``), for ``--plan``'s status view; a job the scheduler cannot be asked about says why. Reads
    only: nothing is submitted or cancelled."""
    out = {}
    for key, rec in state.jobs.items():
        try:
            st = executor.status(str(rec["id"]))
        except Exception as e:  # noqa: BLE001 -- a status the scheduler cannot give is shown, not raised
            st = f"unknown ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
        out[key] = f"{st} (job {rec['id']}, submitted {rec.get('submitted', '?')})"
    return out


MFU_RANGE = (0.10, 0.35)  # a plan's utilisation range without a measurement: FSDP's communication (~10-15 %) to 35 %


@dataclass(frozen=True)
class Estimate:
    """What a plan's hours rest on: one training's wall hours at the high and the low utilisation (equal when
    measured), one evaluation's, and what each number rests on; ``disk``: the checkpoint and download line."""

    train_h: tuple[float, float] | None = None
    eval_h: float | None = None
    basis: str = "no estimate"
    disk: str | None = None
    per_stage: dict[str, float] = field(default_factory=dict)  # a stage's own hours (released: each model's size)

    def stage_hours(self, st: Stage, slow: bool) -> float:
        if st.key in self.per_stage:
            return self.per_stage[st.key]
        if st.key.endswith(" train"):
            return self.train_h[1 if slow else 0] if self.train_h else 0.0
        return (self.eval_h or 0.0) if " evaluate" in st.key else 0.0


def critical_path(stages: list[Stage], hours) -> float:
    """The longest chain of ``hours(stage)`` through the ``after`` edges: the wall-clock of the whole graph when
    every job starts as soon as what it waits for has ended (queueing not counted)."""
    done: dict[str, float] = {}
    for st in stages:  # stage_graph lists a stage after every stage it waits for
        done[st.key] = hours(st) + max((done.get(k, 0.0) for k in st.after), default=0.0)
    return max(done.values(), default=0.0)


def sbatch_preview(st: Stage, folder: Path) -> list[str]:
    """The ``#SBATCH`` lines and setup lines submitit would write for ``st`` (dependencies by stage key: the job ids
    exist only once submitted)."""
    try:
        from submitit.slurm.slurm import _make_sbatch_string
    except ImportError:
        return ["(the sbatch lines need submitit: pip install -e '.[slurm]')"]
    params = with_dependency(st.resources.slurm(), [f"<{k}>" for k in st.after])
    text = _make_sbatch_string(command=" ".join(st.argv), folder=str(folder),
                               job_name=f"numlearn-{st.key}".replace(" ", "_"), **params)
    return [ln for ln in text.splitlines() if ln.startswith("#SBATCH")] + list(st.resources.setup)


def _resources_line(r: Resources) -> str:
    return (f"{r.nodes} node x {r.gpus_per_node} GPU, {r.tasks_per_node} task(s) x {r.cpus_per_task} CPU"
            + (f", {r.mem_gb} GB" if r.mem_gb else "") + f", {r.timeout_min} min"
            + (f", partition {r.partition}" if r.partition else ""))


def _hours_lines(stages: list[Stage], est: Estimate) -> list[str]:
    if est.train_h is None or est.eval_h is None:
        return [f"GPU-hours: unknown ({est.basis})"]
    fast, slow = (sum(st.resources.gpus * est.stage_hours(st, s) for st in stages) for s in (False, True))
    path = [critical_path(stages, lambda st, s=s: est.stage_hours(st, s)) for s in (False, True)]
    span = (lambda a, b: f"{a:.1f}" if abs(a - b) < 0.05 else f"{a:.1f} to {b:.1f}")  # noqa: E731
    return [f"GPU-hours: {span(fast, slow)} ({est.basis})",
            f"critical path: {span(*path)} h wall-clock if every job starts when what it waits for ends (queueing "
            "not counted)"]


def plan_text(stages: list[Stage], executor: str, est: Estimate, status: dict[str, str] | None = None,
              where: dict[str, Path] | None = None) -> str:
    """The job graph: each job's resources, dependencies, command, log and (SLURM) sbatch lines; the GPU-hours
    over the utilisation range, the critical path and the disk; ``where``: the state file and the job folder. With
    ``status`` (``state_view``) each job's state and a count of done, running or pending, failed and not
    submitted."""
    where = where or {}
    lines = [f"plan ({executor}): {len(stages)} jobs, nothing submitted"]
    lines += [f"  {k}: {v}" for k, v in where.items()]
    for i, st in enumerate(stages):
        after = f"  after: {', '.join(st.after)}" if st.after else ""
        now = f"  -- {status.get(st.key, 'not submitted')}" if status is not None else ""
        lines.append(f"{i + 1:3d}. {st.key}  [{_resources_line(st.resources)}]{after}{now}")
        lines.append(f"       $ {' '.join(st.argv)}")
        if st.log:
            lines.append(f"       log: {st.log}")
        if executor == "slurm":
            lines += [f"       {ln}" for ln in sbatch_preview(st, where.get("jobs", Path("submitit")))]
    lines += _hours_lines(stages, est)
    if est.disk:
        lines.append(f"disk: {est.disk}")
    if status is not None:
        said = [status.get(st.key, "not submitted").split(" ")[0] for st in stages]
        lines.append(f"state: {said.count(DONE)} done, {said.count(RUNNING) + said.count(PENDING)} running or pending, "
                     f"{said.count(FAILED)} failed, {said.count('not')} not submitted, "
                     f"{sum(s == 'unknown' for s in said)} unknown (the same command without --plan submits what is "
                     "left)")
    return "\n".join(lines)
