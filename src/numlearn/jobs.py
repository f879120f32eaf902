"""The job runner: a job is a (row, seed)'s steps -- train, evaluate, publish -- run one after another as
processes, their output appended to one log; ``run_jobs`` runs a list of them a few at a time with a console
that a person can read (one live line per running job: phase, step/total, ETA, where its log is).

The pipeline (``numlearn.pipeline``) plans the jobs (``numlearn.planning``) and runs them here. Nothing here
knows about losses, configs or the store."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


class PipelineError(ValueError):
    """A plan that cannot run: one line naming the problem and the fix."""


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


def report_failures(failed: list[Job], say) -> None:
    """Each failed job's note and the last lines of its log, through ``say``."""
    for j in failed:
        say(f"[{j.name}] {j.note or 'stopped'}; its last lines:")
        try:
            tail = j.log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        for ln in tail:
            say(f"[{j.name}]   {ln}")
