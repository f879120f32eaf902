"""The orchestrator: rows x seeds -> train -> evaluate -> publish into the store -> tables.

    python -m numlearn.pipeline table1 --seeds 8 --jobs 4 --reuse     # make reproduce-table1 SEEDS=8 REUSE=1
    python -m numlearn.pipeline tables --seeds 0-7 --out results/table1_tiny
    python -m numlearn.pipeline tables --seeds 8 --from-seed 3 --out results/table1_tiny/unswept_seeds
    python -m numlearn.pipeline sweep --seeds 3 --jobs 4 --reuse      # make sweep-alpha
    python -m numlearn.pipeline sweep-report --seeds 3
    python -m numlearn.pipeline ablation --seeds 8 --jobs 2 --reuse   # make ablation-tiny SEEDS=8 REUSE=1
    python -m numlearn.pipeline pretrained --seeds 8 --jobs 2 --reuse # make pretrained-tiny SEEDS=8 REUSE=1
    python -m numlearn.pipeline released --models qwen2.5-1.5b --with-base   # the authors' checkpoints, eval=paper
    python -m numlearn.pipeline runs experiment=table1_tiny loss=mle,del seed=0,1      # run dirs from the configs
    python -m numlearn.pipeline pending --store results/runs experiment=table1_tiny loss=del seed=0-7

A **row** is a loss with optional weight and extra overrides, written ``loss[:alpha][+key=value...]``
(``del``, ``del:1.28``, ``del:1.28+loss.form=paper``); without an alpha the loss's configured weight
applies (``conf/loss``, ``conf/experiment``). **Seeds**: ``8`` = seeds 0..7, ``3-7`` a range,
``0,2,5`` a list. Each (row, seed) is one job (train, evaluate, publish its result files into the
store as soon as it ends); ``--jobs`` jobs run at once, each training on the preset's thread count, so the numbers do not
depend on ``--jobs``. A job's output goes to ``<outputs>/pipeline/<row>_seed=<s>.log``; the console shows one line per
running job. Every step resumes (training from its last checkpoint, generation from its JSONL), so
an interrupted command is re-run as it was. ``--reuse`` trains only the seeds the store lacks a usable
result for (missing, or trained under another recipe: the reason is printed).

This module sits above everything (it plans from the configs, reads the store and calls the
reporting tools); nothing imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from numlearn.rundirs import recipe_differences, seed_list, training_recipe

EXPERIMENT = "table1_tiny"
TABLE1_LOSSES = ("mle", "ntl", "dist2", "del")
STORE = Path("results/runs")
OUTPUTS = Path("outputs")
TABLE1_OUT = Path("results/table1_tiny")
SWEEP_OUT = Path("results/sweep_alpha")
SELECTED = SWEEP_OUT / "selected.json"
VAL_EVAL = "eval=synthetic_val"
VAL_COLUMN = "synthetic_val (cot)"
TEST_EXCLUDE = "synthetic_val"  # the split weights are chosen on never enters Table 1
# Each numeric loss on the effective scale: the official weight x 1/128, 1/12.8, 1/4, 1, 2; DIST2 two
# points lower as well (under recipe 1 its best point was the grid's lowest: results/archive).
SWEEP_GRID = {"del": (0.01, 0.1, 0.32, 1.28, 2.56), "ntl": (0.1, 1.0, 3.2, 12.8, 25.6),
              "dist2": (0.1, 0.32, 1.0, 10.0, 32.0, 128.0, 256.0)}
# The ablation of DEL's parts (issue 27), on the Table 1 recipe and store: the code form (loss=del,
# the default), the paper's form, no place weights, and the paper's ablation rows MixCE and EMO, at
# the official effective weight; each form again at the weight its validation sweep chooses, on a grid
# that reaches below the Table 1 sweep's lowest point (0.01, where that sweep chose).
ABLATION_ROWS = ("mle", "del", "del_paper", "del_nopw", "mixce", "emo")
# Controls for what the paper form's gain means (issue 40), 8 seeds each on the same recipe: digit-CE
# upweighting alone (the paper form less its linear term) at both of the paper form's weights (1.28, the
# official; 0.32, its validation choice), the same without place weights, and eq. 8 read literally (the
# binary entropy of p(y)). Fixed weights, chosen before any of them ran: the paper form's.
ABLATION_CONTROLS = ("del_ce:1.28", "del_ce:0.32", "del_ce_nopw:0.32", "del_bent:0.32")
ABLATION_GRID = {"del": (0.001, 0.003, 0.01, 0.1, 0.32, 1.28, 2.56), "del_paper": (0.001, 0.01, 0.1, 0.32, 1.28)}
ABLATION_OUT = Path("results/ablation_tiny")
ABLATION_MODEL = "tiny"  # the store's model level: the chunked study's tiny_chunk3 runs share the experiment
# Tokenizers that group digits (issue 28), on the Table 1 recipe and store: the tiny model with a tokenizer
# that cuts every digit run into tokens of up to three digits, left to right, as Llama-3 does
# (model=tiny_chunk3). MLE with single-digit tokens (Table 1's row, reused) against MLE chunked: the
# tokenisation effect; DEL, NTL, DIST2 on number tokens and NTL on whole number tokens (ntl_number) at
# the weights their validation sweep on the chunked model chooses.
CHUNKED_MODEL = "tiny_chunk3"
CHUNKED_GRID = {"del": (0.003, 0.01, 0.1, 1.28), "ntl": (0.1, 1.0, 12.8), "dist2": (1.0, 10.0, 128.0),
                "ntl_number": (1.0e-4, 1.0e-3, 1.0e-2)}
CHUNKED_OUT = Path("results/chunked_tiny")
# A pretrained start (issue 27): each row fine-tunes its seed's MLE base (Table 1's MLE run, trained first
# where missing) on a shifted task (conf/experiment/pretrained_tiny.yaml). MLE, DEL at the official weight
# in both forms, and the weights the Table 1 sweep chose on validation (results/sweep_alpha/selected.json).
PRETRAINED_EXPERIMENT = "pretrained_tiny"
PRETRAINED_ROWS = ("mle", "del", "del_paper")
PRETRAINED_PRIMARY = "synthetic_long3_test"
PRETRAINED_OUT = Path("results/pretrained_tiny")
MIN_SEEDS_FOR_ROBUSTNESS = 3  # robustness.md from 3 seeds (per-seed values); a verdict needs 5 (reporting.robustness)
# The declared headline family of every study (issue 40), fixed before its tables are rebuilt: each row minus MLE
# on the study's primary CoT accuracy and on held-out digit accuracy, Holm-adjusted together (both the bootstrap
# and the paired-t p); distance and digit NLL are secondary, reported uncorrected as exploratory.
FAMILY_METRICS = ("accuracy", "digit_acc")


class PipelineError(ValueError):
    """A plan that cannot run: one line naming the problem and the fix."""


# -- what to run ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    loss: str
    alpha: float | None = None
    extra: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Row:
        head, *extra = spec.split("+")
        loss, _, alpha = head.partition(":")
        if not re.fullmatch(r"[a-z0-9_]+", loss):
            raise PipelineError(f"row {spec!r}: write loss[:alpha][+key=value...], e.g. del:1.28+loss.form=paper")
        try:
            a = float(alpha) if alpha else None
        except ValueError:
            raise PipelineError(f"row {spec!r}: alpha {alpha!r} is not a number") from None
        for e in extra:
            if "=" not in e:
                raise PipelineError(f"row {spec!r}: {e!r} is not a key=value override")
        return cls(loss, a, tuple(extra))

    @property
    def label(self) -> str:
        head = self.loss if self.alpha is None else f"{self.loss}:{_fmt(self.alpha)}"
        return "+".join((head, *self.extra))

    def overrides(self) -> list[str]:
        return [f"loss={self.loss}", *([f"loss.alpha={_fmt(self.alpha)}"] if self.alpha is not None else []),
                *self.extra]


def _fmt(x: float) -> str:
    """A weight as the run dirs spell it (``alpha=1.0``, ``alpha=0.01``): Hydra reads ``1`` as an int."""
    return repr(float(x))


def parse_seeds(spec: str | int) -> list[int]:
    """``8`` -> 0..7 (a count, as ``SEEDS=8``), ``3-7`` -> 3..7, ``0,2,5`` -> those."""
    s = str(spec).strip()
    if re.fullmatch(r"\d+", s):
        n = int(s)
        if n < 1:
            raise PipelineError(f"--seeds {s}: give at least one seed (a count, a-b or a,b,c)")
        return list(range(n))
    if m := re.fullmatch(r"(\d+)-(\d+)", s):
        a, b = int(m.group(1)), int(m.group(2))
        if b < a:
            raise PipelineError(f"--seeds {s}: the range is empty (write low-high)")
        return list(range(a, b + 1))
    try:
        return seed_list(f"seed={s}")
    except ValueError as e:
        raise PipelineError(f"--seeds {s}: {e}") from None


def seeds_arg(seeds: list[int]) -> str:
    return ",".join(map(str, seeds))


def selected_arg(value: str) -> Path | None:
    """``--selected``: a selected.json, or ``none`` (no chosen weights added, no row labelled val-chosen)."""
    return None if value.strip().lower() == "none" else Path(value)


def selected_rows(path: Path | None = SELECTED) -> list[Row]:
    """The sweep's validation-chosen weights as rows (none before ``sweep`` has chosen, or for ``None``)."""
    if path is None or not path.is_file():
        return []
    try:
        chosen = json.loads(path.read_text())
        return [Row(loss, float(v["alpha"])) for loss, v in chosen.items()]
    except (ValueError, KeyError, TypeError) as e:
        raise PipelineError(f"{path} is not the sweep's selected.json ({e}): rerun `make sweep-report`") from None


def sweep_rows(grid: dict[str, tuple[float, ...]]) -> list[Row]:
    return [Row("mle")] + [Row(loss, a) for loss, alphas in grid.items() for a in alphas]


def parse_grid(items: list[str], base: dict[str, tuple[float, ...]] | None = None) -> dict[str, tuple[float, ...]]:
    """``base`` (Table 1's sweep grid by default) with each ``loss=a,b,c`` item replacing a loss's grid."""
    grid = dict(SWEEP_GRID if base is None else base)
    for it in items:
        loss, _, vals = it.partition("=")
        try:
            grid[loss] = tuple(float(v) for v in vals.split(",") if v)
        except ValueError:
            raise PipelineError(f"--grid {it!r}: write loss=a,b,c with numbers") from None
        if not grid[loss]:
            raise PipelineError(f"--grid {it!r} names no weight")
    return grid


# -- the configs: run dirs and the store ----------------------------------------------------------
def _seed_override(o: str) -> list[int]:
    """The seeds of a ``seed=`` override: a range (``seed=3-7``) or a list (``seed=0,1,2``)."""
    return parse_seeds(o.split("=", 1)[1]) if re.fullmatch(r"seed=\d+-\d+", o) else seed_list(o)


def configured_run_roots(overrides: list[str]) -> list[Path]:
    """One run root (seed level stripped) per value of a comma-separated ``loss=`` override; with a
    ``seed=`` override (``seed=0,1,2``), the run directories of those seeds instead."""
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir

    losses, seeds, rest = ["mle"], None, []
    for o in overrides:
        if o.startswith("loss="):
            losses = o.split("=", 1)[1].split(",")
        elif o.startswith("seed="):
            seeds = _seed_override(o)
        else:
            rest.append(o)
    out = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for loss in losses:
            for seed in seeds or [None]:
                cfg = compose("config", overrides=[*rest, f"loss={loss}", *([f"seed={seed}"] if seeds else [])])
                out.append(Path(cfg.run_dir) if seeds else Path(cfg.run_dir).parent)
    return out


def stored_result_problem(d: Path, protocol: str, limit, recipe: dict) -> str | None:
    """Why the store's result in ``d`` (``.../eval/<benchmark>/<mode>``) cannot stand for this run;
    None when it can."""
    from numlearn.records import RESULT
    from numlearn.reporting.store import read_result

    found = [f for f in (d / RESULT, d / f"result.{protocol}.json") if f.exists()]
    if not found:
        return "no result"
    why = []
    for f in found:
        r = read_result(f)
        if r.protocol != protocol:
            why.append(f"protocol {r.protocol}")
            continue
        if r.limit != limit:
            why.append(f"problem limit {r.limit}")
            continue
        # the recipe the model was trained with (run.json, through the evaluator)
        diff = recipe_differences(training_recipe(r.training_config), recipe)
        if diff:
            why.append("trained with another recipe (" + "; ".join(diff[:4]) + (" ..." if len(diff) > 4 else "") + ")")
            continue
        return None
    return ", ".join(why)


def pending_seeds(overrides: list[str], store: str | Path, report=None) -> list[int]:
    """The seeds of ``overrides`` (``seed=0,1,2``) without a usable stored result for every
    benchmark and mode of their ``eval`` config (``stored_result_problem``). ``report(seed, why)``
    hears the reason for each."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.cli import conf_dir
    from numlearn.evaluation.spec import BenchmarkSpec

    seeds, rest = [0], []
    for o in overrides:
        if o.startswith("seed="):
            seeds = _seed_override(o)
        else:
            rest.append(o)
    store = Path(store)
    todo = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for seed in seeds:
            cfg = compose("evaluate", overrides=[*rest, f"seed={seed}"])
            outputs = Path(str(cfg.paths.output_dir)).resolve()
            try:
                rel = Path(str(cfg.eval_dir)).resolve().relative_to(outputs)
            except ValueError:
                raise ValueError(f"eval_dir {cfg.eval_dir} is outside paths.output_dir {outputs}: the store mirrors "
                                 "the output directory, so leave eval_dir at its default") from None
            ecfg = cfg.eval
            limit = OmegaConf.to_container(ecfg).get("limit")
            protocol = str(ecfg.protocol)
            recipe = training_recipe(cfg)
            problems = {f"{name}/{mode}": stored_result_problem(store / rel / name / mode, protocol, limit, recipe)
                        for name, bcfg in ecfg.benchmarks.items()
                        for mode in BenchmarkSpec.from_config(bcfg).modes(ecfg.modes)}
            bad = {k: v for k, v in problems.items() if v is not None}
            if bad:
                todo.append(seed)
                if report:
                    report(seed, "; ".join(f"{k}: {v}" for k, v in bad.items()))
    return todo


# -- jobs -----------------------------------------------------------------------------------------
@dataclass
class Job:
    """One row: its steps run one after another, their output appended to ``log``."""

    name: str
    steps: list[tuple[str, list[str]]]  # (phase, argv)
    log: Path
    phase: str = "waiting"
    started: float | None = None
    ended: float | None = None
    rc: int | None = None
    note: str = ""
    procs: list = field(default_factory=list)
    phase_started: float | None = None

    def status_line(self, now: float) -> str:
        t = f"{(self.ended or now) - self.started:5.0f} s" if self.started else "      "
        mark = {"done": "ok ", "failed": "ERR", "skipped": "-- "}.get(self.phase, ">> " if self.started else ".. ")
        return f"{mark} {self.name:<32} {self.phase:<9} {t}  {self.note}"[:200]

    def progress_note(self, tail: str, now: float) -> str:
        """What a person reads while a step runs: ``step 350/1000, ETA 3 min`` from the training's last
        step line (``step N/M ...``), else a progress bar's ``N/M`` on the last line, with the log's path;
        else the log's last line. ``tail``: the log's last lines (a save's ``1/1`` bar after the last step
        line is not the step count)."""
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        last_line = lines[-1] if lines else ""
        m = next((m for ln in reversed(lines) if (m := _STEP.search(ln))), None) if self.phase == "train" else None
        m = m or _BAR.search(last_line)
        if not m:
            return last_line
        done, total = int(m.group(1)), int(m.group(2))
        eta = ""
        if self.phase_started and 0 < done < total:
            left = (now - self.phase_started) / done * (total - done)
            eta = f", ETA {left / 60:.0f} min" if left >= 90 else f", ETA {left:.0f} s"
        return f"{'step ' if m.re is _STEP else ''}{done}/{total}{eta}  (log: {self.log})"


_STEP = re.compile(r"\bstep (\d+)/(\d+)\b")
_BAR = re.compile(r"\b(\d+)/(\d+) \[")  # tqdm: " 12/200 [00:03<..."


def row_job(row: Row, seed: int, *, experiment: str, evaluations: list[tuple[str, ...]], store: Path,
            outputs: Path, python: str = sys.executable) -> Job:
    """Train (row, seed), run each evaluation (a tuple of evaluate overrides: ``()`` the preset's test
    evaluation, ``("eval=synthetic_val",)`` the sweep's), publish the run's result files."""
    base = [f"experiment={experiment}", *row.overrides(), f"seed={seed}"]
    (run,) = configured_run_roots([f"experiment={experiment}", *row.overrides(), f"paths.output_dir={outputs}",
                                   f"seed={seed}"])
    steps = [("train", [python, "-m", "numlearn.train", "-m", *base, f"paths.output_dir={outputs}"])]
    for ev in evaluations:
        steps.append(("evaluate" + (f" {ev[0].split('=', 1)[-1]}" if ev else ""),
                      [python, "-m", "numlearn.evaluate", "-m", *base, f"paths.output_dir={outputs}", *ev]))
    steps.append(("publish", [python, "-m", "numlearn.reporting.store", "publish", str(run), "--outputs",
                              str(outputs), "--store", str(store)]))
    safe = re.sub(r"[^A-Za-z0-9_.:=+-]", "_", f"{row.label}_seed={seed}")
    return Job(f"{row.label} seed={seed}", steps, outputs / "pipeline" / f"{safe}.log")


@dataclass(frozen=True)
class Request:
    """Rows x seeds, each evaluated with ``evaluate`` (evaluate overrides; ``()``: the preset's test split)."""

    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    evaluate: tuple[str, ...] = ()


def plan(requests: list[Request], *, experiment: str, store: Path, outputs: Path, reuse: bool,
         say=print) -> list[Job]:
    """A job per (row, seed), seed-major (every row's seed 0 first, so a sitting cut short leaves
    whole seeds), each publishing its result files as soon as it ends. A (row, seed) that several
    requests want is one job with their evaluations in turn (never two trainings of one run dir at
    once). With ``reuse``, only what the store lacks."""
    wanted: dict[tuple[str, int], tuple[Row, list[tuple[str, ...]]]] = {}
    for req in requests:
        for row in req.rows:
            todo = list(req.seeds)
            tag = f"[{row.label}{' ' + ' '.join(req.evaluate) if req.evaluate else ''}]"
            if reuse:
                def report(seed, why, tag=tag):
                    say(f"{tag} seed={seed}: {why}")
                todo = pending_seeds([f"experiment={experiment}", *row.overrides(), f"seed={seeds_arg(todo)}",
                                      *req.evaluate], store, report=report)
                if not todo:
                    say(f"{tag} every seed has stored results (--reuse): nothing to run")
                    continue
                say(f"{tag} seeds without stored results: {seeds_arg(todo)}")
            runs = configured_run_roots([f"experiment={experiment}", *row.overrides(), f"paths.output_dir={outputs}",
                                         f"seed={seeds_arg(todo)}"])
            for seed, run in zip(todo, runs):  # keyed by the run dir: "del_paper" and "del_paper:1.28" are one
                evs = wanted.setdefault((str(run), seed), (row, []))[1]
                if req.evaluate not in evs:
                    evs.append(req.evaluate)
    order = sorted(wanted, key=lambda k: k[1])  # stable: rows keep their order within a seed
    return [row_job(wanted[k][0], k[1], experiment=experiment, evaluations=wanted[k][1], store=store,
                    outputs=outputs) for k in order]


def plan_rows(rows: list[Row], seeds: list[int], *, experiment: str, evaluate_overrides: list[str], store: Path,
              outputs: Path, reuse: bool, say=print) -> list[Job]:
    """``plan`` of one request: ``rows`` x ``seeds``, one evaluation."""
    return plan([Request(tuple(rows), tuple(seeds), tuple(evaluate_overrides))], experiment=experiment, store=store,
                outputs=outputs, reuse=reuse, say=say)


class Progress:
    """On a terminal, redrawn in place: one line per running (or failed) job and a count of the rest;
    otherwise one line at each phase change."""

    def __init__(self, jobs: list[Job], stream=None, live: bool | None = None, every: float | None = None):
        self.jobs, self.stream = jobs, stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.lock = threading.Lock()
        self._drawn = 0
        # not on a terminal (make into a pipe or a file): the running jobs' lines every `every` seconds
        self.every = float(os.environ.get("NUMLEARN_PROGRESS_EVERY", 60)) if every is None else every
        self._last_beat = time.time()

    def event(self, job: Job) -> None:
        with self.lock:
            if self.live:
                self._redraw()
            else:
                print(job.status_line(time.time()).rstrip(), file=self.stream, flush=True)

    def summary(self) -> str:
        n = {k: sum(j.phase == k for j in self.jobs) for k in ("done", "failed", "waiting")}
        running = len(self.jobs) - sum(n.values())
        return f"{n['done']}/{len(self.jobs)} jobs done, {running} running, {n['waiting']} waiting, {n['failed']} failed"

    def _redraw(self) -> None:
        now = time.time()
        shown = [j for j in self.jobs if j.phase not in ("done", "waiting")]
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F")
        lines = [j.status_line(now) for j in shown] + [self.summary()]
        for ln in lines:
            self.stream.write("\x1b[2K" + ln + "\n")
        for _ in range(self._drawn - len(lines)):  # the lines of jobs that ended since
            self.stream.write("\x1b[2K\n")
        self._drawn = max(self._drawn, len(lines))
        self.stream.flush()

    def tick(self) -> None:
        if self.live:
            with self.lock:
                self._redraw()
            return
        now = time.time()
        if self.every > 0 and now - self._last_beat >= self.every:
            self._last_beat = now
            with self.lock:
                for j in self.jobs:
                    if j.started and j.phase not in ("done", "failed", "waiting", "stopped"):
                        print(j.status_line(now).rstrip(), file=self.stream, flush=True)
                print(f"   {self.summary()}", file=self.stream, flush=True)


def _tail(log: Path, size: int = 4096) -> str:
    """The log's last ``size`` bytes, carriage returns (progress bars) as line ends."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - size))
            return f.read().decode("utf-8", "replace").replace("\r", "\n")
    except OSError:
        return ""


def _last_line(log: Path) -> str:
    return next((ln.strip() for ln in reversed(_tail(log).splitlines()) if ln.strip()), "")


def run_job(job: Job, progress: Progress, stop: threading.Event, env: dict) -> None:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    job.started = time.time()
    with job.log.open("a", encoding="utf-8") as log:
        for phase, argv in job.steps:
            if stop.is_set():
                job.phase, job.rc = "stopped", -1
                break
            job.phase, job.phase_started, job.note = phase, time.time(), f"(log: {job.log})"
            progress.event(job)
            log.write(f"\n$ {' '.join(argv)}\n")
            log.flush()
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            job.procs.append(p)
            while p.poll() is None:
                job.note = job.progress_note(_tail(job.log), time.time())
                time.sleep(0.5)
            job.procs.remove(p)
            if p.returncode != 0:
                job.phase, job.rc, job.note = "failed", p.returncode, f"{phase} exited {p.returncode}: see {job.log}"
                break
        else:
            job.phase, job.rc, job.note = "done", 0, ""
    job.ended = time.time()
    progress.event(job)


def run_jobs(jobs: list[Job], n_jobs: int, stream=None, live: bool | None = None) -> list[Job]:
    """Run ``jobs``, ``n_jobs`` at once; returns the failed ones (after every job has ended). Ctrl-C
    stops every running step (its process group) and raises KeyboardInterrupt."""
    if n_jobs < 1:
        raise PipelineError(f"--jobs {n_jobs}: give at least 1")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    progress = Progress(jobs, stream, live)
    stop = threading.Event()
    queue = list(jobs)
    qlock = threading.Lock()

    def worker():
        while not stop.is_set():
            with qlock:
                if not queue:
                    return
                job = queue.pop(0)
            run_job(job, progress, stop, env)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(n_jobs, len(jobs)))]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            progress.tick()
            time.sleep(1.0)
    except KeyboardInterrupt:
        stop.set()
        for j in jobs:
            for p in list(j.procs):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGTERM)
        for t in threads:
            t.join(timeout=30)
        raise
    for t in threads:
        t.join()
    progress.tick()
    return [j for j in jobs if j.rc != 0]


def _report_failures(failed: list[Job], say) -> None:
    for j in failed:
        say(f"[{j.name}] {j.note or 'stopped'}; its last lines:")
        try:
            tail = j.log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        for ln in tail:
            say(f"[{j.name}]   {ln}")


# -- the commands ---------------------------------------------------------------------------------
def table1_runs(rows: list[Row], seeds: list[int], *, experiment: str, store: Path) -> list[str]:
    """The store's run directories of ``rows`` x ``seeds`` (what the tables read)."""
    out = []
    for row in rows:
        out += [str(p) for p in configured_run_roots([f"experiment={experiment}", *row.overrides(),
                                                      f"paths.output_dir={store}", f"seed={seeds_arg(seeds)}"])]
    return out


def build_tables(rows: list[Row], seeds: list[int], out: Path, *, experiment: str, store: Path,
                 selected: Path | None, command: str, primary_benchmark: str = "synthetic_test",
                 selection_seeds: tuple[int, ...] = (0, 1, 2), family_metrics: tuple[str, ...] = FAMILY_METRICS) -> int:
    """Table 1's tables from the store only: aggregate, and with 3+ seeds the robustness report
    (``primary_benchmark``: the benchmark whose CoT accuracy and distance are primary; ``family_metrics``:
    every row minus MLE on these is the declared family, Holm-adjusted together)."""
    from numlearn.reporting import aggregate, robustness

    runs = table1_runs(rows, seeds, experiment=experiment, store=store)
    args = ["--exclude-benchmarks", TEST_EXCLUDE, "--out", str(out), "--command", command,
            *(["--selected", str(selected)] if selected is not None and selected.is_file() else [])]
    with contextlib.redirect_stdout(io.StringIO()):  # every table goes to files; the console gets one
        rc = aggregate.main([*runs, *args])
    if rc != 0:
        return rc
    if len(seeds) >= MIN_SEEDS_FOR_ROBUSTNESS:
        with contextlib.redirect_stdout(io.StringIO()):
            rc = robustness.main([*runs, *args, "--primary-benchmark", primary_benchmark,
                                  "--family-metrics", ",".join(family_metrics),
                                  "--selection-seeds", ",".join(map(str, selection_seeds))])
    print(table_section(out / "table1.md", "Accuracy (%)"))
    print(f"(every table -- distance, digit metrics, minus MLE{', robustness' if rc == 0 and len(seeds) >= 3 else ''}"
          f" -- is in {out}/)")
    return rc


def table_section(md: Path, heading: str) -> str:
    """The section ``## heading`` of a markdown file, heading included (the whole file if it has none)."""
    text = md.read_text(encoding="utf-8") if md.is_file() else ""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    return f"## {heading}\n{m.group(1).rstrip()}" if m else text.rstrip()


def compare_with_store(rows: list[Row], seeds: list[int], *, experiment: str, store: Path, committed: Path,
                       say) -> bool:
    """The result files this run put in ``store`` against the committed store, per seed; the last line
    says whether the run reproduced it. True when every file is identical."""
    from numlearn.reporting.store import compare, result_files

    same = True
    for seed in seeds:
        files = [f for run in table1_runs(rows, [seed], experiment=experiment, store=store)
                 for f in result_files(Path(run)) if "/eval/" + TEST_EXCLUDE + "/" not in str(f)]
        c = compare(files, store, committed)
        for line in c.lines(f"seed {seed}", committed):
            say(line)
        same = same and not c.differ and not c.absent and c.n > 0
    return same


def sweep_report(seeds: int, grid: dict[str, tuple[float, ...]], *, experiment: str, store: Path, out: Path,
                 command: str, only_grid: bool = False, model: str = "*") -> int:
    """The sweep's table, plot and chosen weights from the store; ``only_grid``: the grid's losses
    (and MLE) only, not every loss the store holds validation results of; ``model``: that model's
    runs only (the store's model level; every model by default)."""
    from numlearn.reporting import sweep

    root = store / experiment
    losses = ("*",) if not only_grid else ("mle", *grid)
    dirs = sorted(str(p) for loss in losses for p in root.glob(f"{model}/{loss}/alpha=*/seed=*/eval/{TEST_EXCLUDE}"))
    if not dirs:
        raise PipelineError(f"the store {store} holds no {TEST_EXCLUDE} result under {root}: run the sweep first")
    expect = ["--expect", "mle=0"] + [x for loss, alphas in grid.items()
                                      for x in ("--expect", f"{loss}={','.join(_fmt(a) for a in alphas)}")]
    return sweep.main([*dirs, "--select-on", VAL_COLUMN, "--out", str(out), "--min-seeds", str(seeds), *expect,
                       "--command", command])


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _docs_hint() -> None:
    """After the committed tables change: whether the README/docs blocks still match them."""
    from numlearn.reporting.docs import check_text

    stale = [d for d in (Path("README.md"), Path("docs/results.md")) if d.is_file()
             and check_text(d.read_text(encoding="utf-8"), Path("."), str(d), str(d.parent))]
    if stale:
        _say(f"docs: {', '.join(map(str, stale))} no longer match the committed tables: `make docs` copies the "
             "tables in; then reread the prose the check names")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m numlearn.pipeline", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, seeds_default):
        p.add_argument("--seeds", default=seeds_default, help="a count (8 = 0..7), a range (3-7) or a list (0,2,5)")
        p.add_argument("--experiment", default=EXPERIMENT)
        p.add_argument("--store", type=Path, default=Path(os.environ.get("NUMLEARN_STORE", STORE)))
        p.add_argument("--command", default=None, help="the command recorded in the tables' header")

    def study_metrics(p):
        p.add_argument("--primary-benchmark", default="synthetic_test",
                       help="the benchmark whose CoT accuracy and distance are primary (robustness.md)")
        p.add_argument("--family-metrics", default=",".join(FAMILY_METRICS), metavar="M,M",
                       help="the declared family: every row minus MLE on these metrics, Holm-adjusted together "
                            "(accuracy, distance, digit_acc, digit_nll)")

    def running(p):
        p.add_argument("--jobs", type=int, default=4, help="rows at once (each trains on the preset's threads)")
        p.add_argument("--reuse", action="store_true", help="run only the seeds the store lacks a usable result for")
        p.add_argument("--outputs", type=Path, default=Path(os.environ.get("NUMLEARN_OUTPUT_DIR", OUTPUTS)))
        p.add_argument("--live", choices=("auto", "on", "off"), default="auto", help="redraw the job lines in place")

    p = sub.add_parser("table1", help="train, evaluate and publish every row, then build the tables")
    common(p, "1")
    running(p)
    p.add_argument("--rows", default=None, help="comma-separated rows, loss[:alpha][+key=value...] (default: "
                   f"{','.join(TABLE1_LOSSES)}); the sweep's chosen weights are added")
    p.add_argument("--selected", type=selected_arg, default=SELECTED,
                   help="the sweep's chosen weights (rows labelled val-chosen); none: no chosen weights")
    p.add_argument("--out", type=Path, default=TABLE1_OUT)
    p.add_argument("--compare-with", type=Path, default=None, metavar="STORE",
                   help="compare this run's result files with that store (the committed results/runs) and end "
                        "with one line per seed saying whether they are identical; nothing is written there")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with (a shrunken rehearsal: make smoke)")
    study_metrics(p)
    p = sub.add_parser("tables", help="Table 1's tables from the store only (no training)")
    common(p, "1")
    study_metrics(p)
    p.add_argument("--from-seed", type=int, default=None,
                   help="only the seeds from this one on (the seeds a sweep of that many seeds never saw)")
    p.add_argument("--rows", default=None)
    p.add_argument("--selected", type=selected_arg, default=SELECTED)
    p.add_argument("--out", type=Path, default=TABLE1_OUT)
    p = sub.add_parser("sweep", help="every loss over its weight grid on the validation split, then the report")
    common(p, "3")
    running(p)
    p.add_argument("--grid", action="append", default=[], metavar="LOSS=A,B,...", help="replace a loss's grid")
    p.add_argument("--out", type=Path, default=SWEEP_OUT)
    p = sub.add_parser("sweep-report", help="the sweep's table, plot and chosen weights from the store (no training)")
    common(p, "3")
    p.add_argument("--grid", action="append", default=[], metavar="LOSS=A,B,...")
    p.add_argument("--out", type=Path, default=SWEEP_OUT)
    p = sub.add_parser("ablation", help="DEL's parts: the ablation rows, each form's validation sweep, the table")
    common(p, "8")
    running(p)
    p.add_argument("--sweep-seeds", default="3", help="seeds of the validation sweep (a count, range or list)")
    p.add_argument("--out", type=Path, default=ABLATION_OUT)
    p = sub.add_parser("pretrained", help="a pretrained start: each row fine-tunes its seed's MLE base on a "
                                          "shifted task (the bases trained first where missing), then the tables")
    common(p, "8")
    running(p)
    p.set_defaults(experiment=PRETRAINED_EXPERIMENT)
    p.add_argument("--rows", default=None, help="comma-separated rows (default: "
                   f"{','.join(PRETRAINED_ROWS)} and the Table 1 sweep's chosen weights)")
    p.add_argument("--selected", type=selected_arg, default=SELECTED,
                   help="the sweep's chosen weights (rows labelled val-chosen); none: no chosen weights")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with (a shrunken rehearsal)")
    p.add_argument("--base-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override the missing bases train with (and a complete base is checked against)")
    p.add_argument("--out", type=Path, default=PRETRAINED_OUT)
    p = sub.add_parser("chunked", help="tokenizers that group digits: MLE single vs chunked, the numeric losses on "
                                       "number tokens at their validation-chosen weights")
    common(p, "8")
    running(p)
    p.add_argument("--sweep-seeds", default="3", help="seeds of the validation sweep (a count, range or list)")
    p.add_argument("--grid", action="append", default=[], metavar="LOSS=A,B,...", help="replace a loss's grid")
    p.add_argument("--only", default=None, metavar="LOSS,...", help="sweep and tabulate only these losses")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with (a shrunken rehearsal)")
    p.add_argument("--out", type=Path, default=CHUNKED_OUT)
    p = sub.add_parser("released", help="the DEL authors' released checkpoints evaluated as the paper did (eval=paper), "
                                        "beside their reported mACC (conf/study/released.yaml)")
    p.add_argument("--models", default=None, help="comma-separated names from conf/study/released.yaml (default: all)")
    p.add_argument("--with-base", action="store_true", help="evaluate each checkpoint's base model too")
    p.add_argument("--hub-map", action="append", default=[], metavar="HUB_ID=DIR",
                   help="a hub id's local copy (downloaded weights, or a stand-in)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="an evaluate override for every job (eval.tensor_parallel_size=1 on one GPU)")
    p.add_argument("--jobs", type=int, default=1, help="evaluations at once (each wants the GPUs it names)")
    p.add_argument("--store", type=Path, default=Path(os.environ.get("NUMLEARN_STORE", STORE)))
    p.add_argument("--outputs", type=Path, default=Path(os.environ.get("NUMLEARN_OUTPUT_DIR", OUTPUTS)))
    p.add_argument("--out", type=Path, default=Path("results/released"))
    p.add_argument("--reuse", action="store_true", help="evaluate only what the store lacks")
    p.add_argument("--live", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--command", default=None)
    p = sub.add_parser("smoke", help="the whole pipeline shrunken (MLE and DEL, 1 seed, 40 steps, 10 problems) in "
                                     "a temporary directory (make smoke, ~2 min); prints what to expect")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--dir", type=Path, default=None, help="where (default: a new temporary directory)")
    p = sub.add_parser("notebook", help="execute notebooks/analysis.ipynb from the committed store, outputs kept")
    p = sub.add_parser("runs", help="the run directories the configs name (Hydra overrides)")
    p.add_argument("overrides", nargs="*")
    p = sub.add_parser("pending", help="the seeds without a usable stored result (Hydra overrides)")
    p.add_argument("--store", default=str(STORE))
    p.add_argument("overrides", nargs="*")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    a.invocation = "python -m numlearn.pipeline " + shlex.join(argv)
    try:
        return _dispatch(a)
    except (PipelineError, ValueError, OSError) as e:  # the store's StoreError is a ValueError
        _say(f"numlearn.pipeline: error: {e}")
        return 2
    except KeyboardInterrupt:
        _say("numlearn.pipeline: interrupted; every step resumes: run the same command again")
        return 130


def notebook() -> int:
    """notebooks/analysis.ipynb regenerated from its script and executed on the committed store, so
    it is committed with its tables and plots (a reader on a code host sees them)."""
    from numlearn.cli import REPO_ROOT

    script = REPO_ROOT / "notebooks" / "make_analysis_notebook.py"
    if not script.is_file():
        raise PipelineError(f"{script} not found: run from a clone of numlearn")
    _say(f"[notebook] executing {script.with_name('analysis.ipynb')} on {STORE}")
    return subprocess.run([sys.executable, str(script), "--execute"], cwd=REPO_ROOT).returncode


SMOKE_OVERRIDES = ("train.max_steps=40", "eval.limit=10", "eval.teacher_forced.n=20")


def smoke(a) -> int:
    """``make smoke``: train -> evaluate -> store -> table on two rows shrunk to 40 steps and 10
    problems a benchmark, in a directory of its own (nothing under the checkout is written)."""
    import tempfile

    d = a.dir or Path(tempfile.mkdtemp(prefix="numlearn-smoke-"))
    _say(f"[smoke] MLE and DEL (1.28), seed 0, {', '.join(SMOKE_OVERRIDES)}; everything under {d}")
    argv = ["table1", "--rows", "mle,del", "--selected", "none", "--seeds", "1", "--jobs", str(a.jobs),
            "--outputs", str(d / "outputs"), "--store", str(d / "store"), "--out", str(d / "tables"),
            "--live", "off", "--command", "make smoke", *(x for o in SMOKE_OVERRIDES for x in ("--override", o))]
    rc = main(argv)
    if rc == 0:
        print(f"[smoke] what you should see: the Accuracy table above with rows mle and del (alpha=1.28), 1 seed, "
              f"each cell 0-30 % (40 steps teach the tiny model little; the real run trains 1,000). The pipeline "
              f"ran end to end. Files: {d}")
    return rc


def released(a) -> int:
    """The released checkpoints: one evaluation job per (checkpoint, role), each published, then the table."""
    from numlearn import released as rel
    from numlearn.cli import conf_dir
    from numlearn.evaluation.teacher_forced import preset_config

    study = rel.choose(rel.load_study(Path(conf_dir()) / "study" / "released.yaml"), a.models)
    hub_map = {}
    for m in a.hub_map:
        hub, eq, d = m.partition("=")
        if not eq or not Path(d).is_dir():
            raise PipelineError(f"--hub-map {m!r}: give HUB_ID=DIR with DIR an existing model directory")
        hub_map[hub] = str(Path(d).resolve())
    roles = rel.ROLES if a.with_base else ("released",)
    jobs = []
    for ck in study:
        for role in roles:
            if a.reuse and rel.stored_results(a.store, ck, role):
                _say(f"[released] {ck.name}/{role}: stored results found (--reuse): not evaluated again")
                continue
            log = a.outputs / "pipeline" / f"released_{ck.name}_{role}.log"
            jobs.append(Job(f"{ck.name} {role}", rel.evaluate_steps(ck, role, outputs=a.outputs, store=a.store,
                                                                    hub_map=hub_map, overrides=a.override), log))
    os.environ.setdefault("HF_HUB_OFFLINE", "")  # the hub ids are the real path: let evaluate reach the hub
    failed = run_jobs(jobs, a.jobs, live={"auto": None, "on": True, "off": False}[a.live]) if jobs else []
    benchmarks = tuple(preset_config(study[0].experiment, list(a.override)).eval.benchmarks) if study else ()
    text = rel.table(study, a.store, a.out, a.command or a.invocation, benchmarks)
    print(text)
    if failed:
        _say(f"[released] {len(failed)} evaluation(s) failed: " + ", ".join(f"{j.name} (log: {j.log})" for j in failed))
        return 1
    return 0


def _dispatch(a) -> int:
    if a.cmd == "smoke":
        return smoke(a)
    if a.cmd == "released":
        return released(a)
    if a.cmd == "notebook":
        return notebook()
    if a.cmd == "runs":
        for p in configured_run_roots(a.overrides):
            print(p)
        return 0
    if a.cmd == "pending":
        seeds = pending_seeds(a.overrides, a.store, report=lambda seed, why: _say(f"[store] seed={seed}: {why}"))
        print(seeds_arg(seeds))
        return 0
    seeds = parse_seeds(a.seeds)
    if getattr(a, "from_seed", None) is not None:
        seeds = [s for s in seeds if s >= a.from_seed]
        if not seeds:
            raise PipelineError(f"--seeds {a.seeds} leaves no seed from {a.from_seed} on (the sweep's seeds are "
                                f"0..{a.from_seed - 1}): give more seeds, e.g. --seeds 8")
    live = {"auto": None, "on": True, "off": False}.get(getattr(a, "live", "auto"))
    if a.cmd in ("table1", "tables"):
        rows = [Row.parse(r) for r in (a.rows or ",".join(TABLE1_LOSSES)).split(",") if r]
        rows += [r for r in selected_rows(a.selected) if r not in rows]
        if extra := tuple(getattr(a, "override", None) or ()):
            rows = [Row(r.loss, r.alpha, (*r.extra, *extra)) for r in rows]
        if a.cmd == "table1" and a.compare_with is not None and a.compare_with.resolve() == a.store.resolve():
            raise PipelineError(f"--compare-with {a.compare_with} is the store this run publishes into (--store): "
                                "give the user's own store, e.g. --store outputs/store")
        if a.cmd == "table1":
            jobs = plan_rows(rows, seeds, experiment=a.experiment, evaluate_overrides=[], store=a.store,
                             outputs=a.outputs, reuse=a.reuse, say=_say)
            failed = run_jobs(jobs, a.jobs, live=live) if jobs else []
            if failed:
                _report_failures(failed, _say)
                return 1
            default = (a.rows is None and a.out == TABLE1_OUT and a.experiment == EXPERIMENT
                       and a.store == STORE)
            command = a.command or (f"make reproduce-table1 SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else "")
                                    if default else a.invocation)
        else:
            command = a.command or a.invocation
        rc = build_tables(rows, seeds, a.out, experiment=a.experiment, store=a.store, selected=a.selected,
                          command=command, primary_benchmark=a.primary_benchmark,
                          family_metrics=tuple(m for m in a.family_metrics.split(",") if m))
        if rc == 0 and a.out.resolve() == TABLE1_OUT.resolve():
            _docs_hint()
        if rc == 0 and a.cmd == "table1" and a.compare_with is not None:
            compare_with_store(rows, seeds, experiment=a.experiment, store=a.store, committed=a.compare_with,
                               say=lambda m: print(m, flush=True))
        return rc
    if a.cmd == "ablation":
        return ablation(a, seeds, live)
    if a.cmd == "chunked":
        return chunked(a, seeds, live)
    if a.cmd == "pretrained":
        return pretrained(a, seeds, live)
    grid = parse_grid(a.grid)
    command = a.command or ("make sweep-alpha SWEEP_SEEDS=" + str(a.seeds) + "".join(
        f" SWEEP_{k.upper()}={','.join(_fmt(x) for x in v)}" for k, v in grid.items()))
    if a.cmd == "sweep":
        jobs = plan_rows(sweep_rows(grid), seeds, experiment=a.experiment, evaluate_overrides=[VAL_EVAL],
                         store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
        failed = run_jobs(jobs, a.jobs, live=live) if jobs else []
        if failed:
            _report_failures(failed, _say)
            return 1
    return sweep_report(len(seeds), grid, experiment=a.experiment, store=a.store, out=a.out, command=command)


def ablation(a, seeds: list[int], live) -> int:
    """Three stages, each resumable: (1) the ablation rows on every seed and each form's sweep points
    on the sweep's seeds, in one pool; (2) the sweep report, which chooses each form's weight on the
    validation split (stops while a point lacks a seed); (3) the chosen weights' rows on every seed,
    then the tables into ``--out``."""
    sweep_seeds = parse_seeds(a.sweep_seeds)
    rows = [Row(r) for r in ABLATION_ROWS] + [Row.parse(r) for r in ABLATION_CONTROLS]
    grid_rows = [Row("mle")] + [Row(loss, x) for loss, xs in ABLATION_GRID.items() for x in xs]
    common = dict(experiment=a.experiment, store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
    jobs = plan([Request(tuple(rows), tuple(seeds)), Request(tuple(grid_rows), tuple(sweep_seeds), (VAL_EVAL,))],
                **common)
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        _report_failures(failed, _say)
        return 1
    command = a.command or (f"make ablation-tiny SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else ""))
    rc = sweep_report(len(sweep_seeds), ABLATION_GRID, experiment=a.experiment, store=a.store, out=a.out / "sweep",
                      command=command, only_grid=True, model=ABLATION_MODEL)
    if rc != 0:
        return rc
    chosen = [r for r in selected_rows(a.out / "sweep" / "selected.json") if r not in rows]
    jobs = plan([Request(tuple(chosen), tuple(seeds))], **common) if chosen else []
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        _report_failures(failed, _say)
        return 1
    return build_tables(rows + chosen, seeds, a.out, experiment=a.experiment, store=a.store,
                        selected=a.out / "sweep" / "selected.json", command=command,
                        selection_seeds=tuple(sweep_seeds))


def base_jobs(seeds: list[int], *, experiment: str, outputs: Path, extra: tuple[str, ...] = (),
              python: str = sys.executable, say=print) -> list[Job]:
    """A training job per seed whose base model (``model.source=run``: ``model.base.run`` under
    ``outputs``, trained by ``model.base.train`` and ``extra``) is not complete. A complete base trained under
    another recipe than ``model.base.train`` composes today is an error (its fine-tunes would stand
    on another model): move it away, or fine-tune from it on purpose with ``model.base_model_dir``."""
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir
    from numlearn.records import RunRecord
    from numlearn.rundirs import run_is_complete
    from numlearn.training.model import base_final_dir

    jobs = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for seed in seeds:
            cfg = compose("config", overrides=[f"experiment={experiment}", f"seed={seed}", *extra])
            if cfg.model.get("source") != "run":
                raise PipelineError(f"experiment={experiment}: model {cfg.model.name} is not a fine-tune of a stored "
                                    "run (model.source=run)")
            if cfg.model.get("base_model_dir"):
                continue  # named by hand: build_model checks it
            base = cfg.model.base
            train = [str(o) for o in base.train]
            run_dir = base_final_dir(cfg.model, outputs, seed).parent
            if run_is_complete(run_dir):
                want = training_recipe(compose("config", overrides=[*train, *extra, f"seed={seed}"]))
                have = RunRecord.of_run_dir(run_dir).recipe or {}
                if diff := recipe_differences(have, want):
                    raise PipelineError(f"base {run_dir} was trained under another recipe than {' '.join(train)} "
                                        f"composes now ({'; '.join(diff[:3])}): move it away to retrain it, or "
                                        "name it with model.base_model_dir to fine-tune from it anyway")
                say(f"[base seed={seed}] {run_dir}: complete")
                continue
            say(f"[base seed={seed}] {run_dir}: missing or unfinished, trained first")
            job = Job(f"base seed={seed}", [("train", [python, "-m", "numlearn.train", *train, *extra, f"seed={seed}",
                                                        f"paths.output_dir={outputs}"])],
                      outputs / "pipeline" / f"base_{re.sub(r'[^A-Za-z0-9_.=-]', '_', str(base.run))}_seed={seed}.log")
            jobs.append(job)
    return jobs


def pretrained(a, seeds: list[int], live) -> int:
    """Issue 27's pretrained start: the missing bases first (every seed's MLE base model), then each row
    fine-tunes its seed's base and is evaluated on the target task and the base task, then the tables
    (each row minus MLE, the target task's CoT primary) into ``--out``."""
    extra = tuple(a.override)
    names = [x for x in (a.rows or ",".join(PRETRAINED_ROWS)).split(",") if x]
    rows = [Row.parse(x) for x in names]
    if a.rows is None:
        rows += [r for r in selected_rows(a.selected) if r not in rows]
    rows = [Row(r.loss, r.alpha, (*r.extra, *extra)) for r in rows]
    jobs = plan_rows(rows, seeds, experiment=a.experiment, evaluate_overrides=[], store=a.store, outputs=a.outputs,
                     reuse=a.reuse, say=_say)
    # the bases only where a row still trains: tables from a complete store need none of them
    todo = sorted({int(j.name.rsplit("seed=", 1)[1]) for j in jobs})
    bases = base_jobs(todo, experiment=a.experiment, outputs=a.outputs, extra=tuple(a.base_override),
                      say=_say) if todo else []
    if bases and (failed := run_jobs(bases, a.jobs, live=live)):
        _report_failures(failed, _say)
        return 1
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        _report_failures(failed, _say)
        return 1
    command = a.command or (f"make pretrained-tiny SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else ""))
    # the chosen weights label their rows "val-chosen" when the table holds every one of them
    chosen = {(r.loss, r.alpha) for r in selected_rows(a.selected)}
    label = chosen and chosen <= {(r.loss, r.alpha) for r in rows}
    return build_tables(rows, seeds, a.out, experiment=a.experiment, store=a.store,
                        selected=a.selected if label else None, command=command, primary_benchmark=PRETRAINED_PRIMARY)


def chunked(a, seeds: list[int], live) -> int:
    """Issue 28's table, in the ablation's three resumable stages: (1) MLE on both tokenizers on every
    seed and the chunked model's sweep points on the sweep's seeds; (2) the sweep report on the chunked
    model's runs, which chooses each loss's weight on validation; (3) the chosen rows on every seed,
    then the chunked table (each loss minus chunked MLE) and the tokenisation effect (chunked MLE minus
    single-digit MLE) into ``--out``."""
    from numlearn.reporting import aggregate

    extra = tuple(a.override)
    model = (f"model={CHUNKED_MODEL}", *extra)
    grid = parse_grid(a.grid, CHUNKED_GRID)
    if a.only:
        only = [x for x in a.only.split(",") if x]
        if unknown := [x for x in only if x not in grid]:
            raise PipelineError(f"--only {','.join(unknown)}: not in the grid ({', '.join(grid)})")
        grid = {k: v for k, v in grid.items() if k in only}
    sweep_seeds = parse_seeds(a.sweep_seeds)
    single, mle_chunked = Row("mle", None, extra), Row("mle", None, model)
    grid_rows = [mle_chunked] + [Row(loss, x, model) for loss, xs in grid.items() for x in xs]
    common = dict(experiment=a.experiment, store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
    jobs = plan([Request((single, mle_chunked), tuple(seeds)),
                 Request(tuple(grid_rows), tuple(sweep_seeds), (VAL_EVAL,))], **common)
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        _report_failures(failed, _say)
        return 1
    command = a.command or (f"make chunked-tiny SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else ""))
    rc = sweep_report(len(sweep_seeds), grid, experiment=a.experiment, store=a.store, out=a.out / "sweep",
                      command=command, only_grid=True, model=CHUNKED_MODEL)
    if rc != 0:
        return rc
    chosen = [Row(r.loss, r.alpha, model) for r in selected_rows(a.out / "sweep" / "selected.json")]
    jobs = plan([Request(tuple(chosen), tuple(seeds))], **common) if chosen else []
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        _report_failures(failed, _say)
        return 1
    rc = build_tables([mle_chunked, *chosen], seeds, a.out, experiment=a.experiment, store=a.store,
                      selected=a.out / "sweep" / "selected.json", command=command, selection_seeds=tuple(sweep_seeds))
    if rc != 0:
        return rc
    runs = table1_runs([single, mle_chunked], seeds, experiment=a.experiment, store=a.store)
    df, _ = aggregate.load_table_results(runs, exclude_benchmarks=[TEST_EXCLUDE], recipe_may_differ_in=("model",))
    md, rows = aggregate.across_models(df, base_model=str(df[df["model"] != CHUNKED_MODEL]["model"].iloc[0]))
    out = a.out / "tokenisation"
    out.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out / "vs_single_digit.csv", index=False)
    (out / "tokenisation.md").write_text(aggregate.header(command, out_dir=out) + "\n\n## MLE chunked minus MLE "
                                         "single-digit\n\n" + md + "\n")
    _say(f"[chunked] tables -> {a.out}, tokenisation effect -> {out / 'tokenisation.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
