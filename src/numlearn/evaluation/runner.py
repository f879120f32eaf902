"""Generation (resumable JSONL) and scoring of one benchmark in one mode.

Modes: ``cot`` (chain of thought), ``pot`` (program of thought only) and ``paper`` (the paper's
protocol: PoT first with a CoT backup for open sets, CoT for multiple choice).
Each finished problem is one line of ``generations.jsonl``, appended as soon as its batch is
done; re-running skips the ids already there. ``result.json`` is written from the JSONL.

A line keeps the raw material of every attempt (prompt, completion, and -- when the completion
contains ``print(`` -- the program's run as-is and as the official executor wraps it), so
``score_row`` can answer it under either protocol without generating again. Under ``paper`` the
CoT backup is generated whenever EITHER protocol needs it; each protocol then uses it only where
its own rule says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from numlearn.data.prompts import MC_PRIMER, POT_SUFFIX, format_prompt
from numlearn.rundirs import RunDirLock

from . import official
from .backends.base import SamplingConfig
from .benchmarks import Problem
from .extract import is_equivalent_symbolic
from .sandbox import run_program
from .scorers import SCORERS, Scorer, get_scorer
from .spec import BenchmarkSpec, as_spec

log = logging.getLogger("numlearn.evaluate")  # what the user ran; Hydra's job logging shows it

MODES = ("cot", "pot", "paper")


def read_jsonl(path: str | Path) -> tuple[list[dict], int]:
    """Records of a generations file and the number of unreadable lines (a line cut by an
    interruption, anything that is not a JSON object with an id, or a second line for an id already
    read, is dropped and counted; the caller rewrites the file and regenerates what is missing)."""
    recs, bad, seen = [], 0, set()
    p = Path(path)
    if not p.exists():
        return recs, 0
    # split on "\n" only: str.splitlines() also splits at U+2028 / U+2029 / U+0085 / \x1c-\x1e,
    # which json.dumps(ensure_ascii=False) leaves raw inside a completion
    for line in p.read_text(encoding="utf-8", errors="replace").split("\n"):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(r, dict) and "id" in r and r["id"] not in seen:
            seen.add(r["id"])
            recs.append(r)
        else:
            bad += 1
    return recs, bad


# -- the hash chain (issue 41, item 7): each line carries ``chain``, the sha256 of the previous line's digest
# (the first line's: the run's seed) and the line's own JSON without it. The seed hashes the run key: the
# model and sampling (``generation_key``) and the sandbox settings the programs ran under. A line edited
# after it was written breaks the chain there; result.json records the head, so ``score --check`` sees
# an edit, and ``--rerun-programs`` re-executes the recorded programs (a forger can recompute a keyless
# chain, not the programs' outputs).
CHAIN_FORMAT = "numlearn-generations/1"


def run_key(generation_key: str, pot_timeout_s: float, allow_unsafe_exec: bool) -> str:
    """What a generations file's lines come from: model and sampling, and the sandbox settings."""
    return json.dumps({"generation": generation_key, "sandbox": {"pot_timeout_s": float(pot_timeout_s),
                                                                 "allow_unsafe_exec": bool(allow_unsafe_exec)}},
                      sort_keys=True)


def chain_seed(key: str) -> str:
    return hashlib.sha256(f"{CHAIN_FORMAT}\n{key}".encode()).hexdigest()


def line_digest(prev: str, row: dict) -> str:
    body = json.dumps({k: v for k, v in row.items() if k != "chain"}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(f"{prev}\n{body}".encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class ChainWalk:
    head: str  # the digest of the last line that verified (the seed when none did)
    lines: int  # lines that verified, in order
    verified: set = field(default_factory=set)  # their ids
    broken_at: int | None = None  # the 1-based line number where the chain breaks
    broken_id: str | None = None
    unchained: int = 0  # lines written before generations were chained (no ``chain`` field)


def walk_chain(path: str | Path, key: str) -> ChainWalk:
    """Verify a generations file's chain from the seed of ``key``. Lines ``read_jsonl`` drops (not JSON,
    no id, exact repeats of a line already read) are skipped; a line without ``chain`` ends the walk as
    unchained; the first line whose digest is not its predecessor's successor is where it breaks."""
    walk, seen = ChainWalk(chain_seed(key), 0), set()
    p = Path(path)
    if not p.exists():
        return walk
    lines = p.read_text(encoding="utf-8", errors="replace").split("\n")
    for no, line in enumerate(lines, 1):
        if not line.strip() or line in seen:
            continue
        seen.add(line)
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(r, dict) or "id" not in r:
            continue
        if "chain" not in r:
            walk.unchained = sum(1 for x in lines[no - 1:] if x.strip())
            return walk
        if r["chain"] != line_digest(walk.head, r):
            walk.broken_at, walk.broken_id = no, str(r["id"])
            return walk
        walk.head, walk.lines = r["chain"], walk.lines + 1
        walk.verified.add(r["id"])
    return walk


class GenerationsLock(RunDirLock):
    """An exclusive lock on a generations file for one evaluation (``<file>.lock``, ``flock``): a
    second evaluation of the same run dir stops with one line instead of appending every line twice."""

    def __init__(self, path: Path):
        super().__init__(Path(str(path) + ".lock"), "evaluation", "wait for it to finish, then re-run to resume")


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1)


def row_fingerprint(generation_key: str, first_prompt: str) -> str:
    """What a generations line was produced from: the model and sampling (``generation_key``) and
    the prompt. Resume reuses a line only when this matches."""
    return hashlib.sha256(f"{generation_key}\n{first_prompt}".encode()).hexdigest()[:20]


def _program_of(completion: str) -> str | None:
    if "print(" not in completion:
        return None
    return completion.split("### Instruction")[0]


def _run(code: str, timeout_s: float, allow_unsafe: bool, settings: dict | None = None) -> dict:
    r = run_program(code, timeout_s=timeout_s, allow_unsafe=allow_unsafe, **(settings or {}))
    out = {"output": r.stdout, "ok": r.ok, "error": r.error or None}
    # what stopped it, when a bound of ours did (the official executor has neither bound)
    if r.memory_limited:
        out["stop"] = "memory"
    elif r.output_truncated:
        out["stop"] = "output"
    elif r.timed_out:
        out["stop"] = "timeout"
    return out


class ProgramExecutor:
    """Runs a batch of generated programs, each in its own sandbox, ``workers`` at a time.

    A sandboxed program spends most of its time starting namespaces and an interpreter, not
    computing, so several in flight keep the cores busy (``make bench-tiny``). Each worker thread
    waits on one sandbox at a time; the sandbox is started without Python code between fork and
    exec (``_limited_exec.py``), so starting them from threads is safe. Only OS-isolated
    programs run concurrently: the unsafe process fallback cleans up after a timeout by killing
    every process of the sandbox uid, which would take the neighbours with it, so there
    ``workers`` is 1.
    """

    def __init__(self, timeout_s: float, allow_unsafe: bool = False, workers: int = 1):
        from .sandbox import isolation_status

        self.timeout_s, self.allow_unsafe = timeout_s, allow_unsafe
        self.workers = max(1, int(workers)) if isolation_status()[0] else 1
        self._pool = None

    def run(self, codes: list[str], settings: list[dict | None] | None = None) -> list[dict]:
        """Each code's run; ``settings``: per code, extra ``run_program`` keywords (or None)."""
        settings = settings if settings is not None else [None] * len(codes)
        if self.workers == 1 or len(codes) < 2:
            return [_run(c, self.timeout_s, self.allow_unsafe, k) for c, k in zip(codes, settings)]
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="numlearn-program")
        n = len(codes)
        return list(self._pool.map(_run, codes, [self.timeout_s] * n, [self.allow_unsafe] * n, settings))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_attempts(kind: str, prompts: list[str], completions: list[str], programs: ProgramExecutor) -> list[dict]:
    """One attempt per generation and, for each that wrote a program, its two runs: ``strict``
    (as written) and ``official`` (wrapped as the official executor runs it)."""
    atts = [{"kind": kind, "prompt": p, "completion": c, "program": None} for p, c in zip(prompts, completions)]
    codes = [(i, _program_of(a["completion"])) for i, a in enumerate(atts)]
    codes = [(i, c) for i, c in codes if c is not None]
    runs = programs.run([c for _, c in codes] + [official.wrap_program(c) for _, c in codes],
                        [None] * len(codes) + [official.executor_run_kwargs(c) for _, c in codes])
    for j, (i, _) in enumerate(codes):
        atts[i]["program"] = {"strict": runs[j],
                              "official": official.unframe(runs[len(codes) + j]) | {"executor": official.EXECUTOR_VERSION}}
    return atts


def _old_executor(row: dict) -> bool:
    """A line whose official program runs came from an earlier emulation of the official executor."""
    return any((a.get("program") or {}).get("official", {}).get("executor", 1) != official.EXECUTOR_VERSION
               for a in row.get("attempts", []) if a.get("program"))


def make_attempt(kind: str, prompt: str, completion: str, timeout_s: float, allow_unsafe: bool = False) -> dict:
    """``make_attempts`` for one generation, its programs run here, one after the other."""
    return make_attempts(kind, [prompt], [completion], ProgramExecutor(timeout_s, allow_unsafe))[0]


def score_row(benchmark: str | BenchmarkSpec, row: dict, protocol: str | Scorer, force_choice_letter: bool = False) -> dict:
    """The answer of one generations line under the scorer ``protocol`` names (``Scorer.score_row``)."""
    return get_scorer(protocol).score_row(as_spec(benchmark), row, force_choice_letter)


def _needs_backup(benchmark: BenchmarkSpec, att: dict, requested: str) -> bool:
    """Mode ``paper``: a first attempt some scorer finds no answer in gets a CoT backup, so every
    scorer can be applied to the same generations later."""
    return any(s.attempt_pred(benchmark, att, requested) == "" for s in SCORERS.values())


class _Progress:
    def __init__(self, total: int, desc: str):
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True, mininterval=2.0)
        except ImportError:  # pragma: no cover
            self.bar = None

    def update(self, n: int):
        if self.bar is not None:
            self.bar.update(n)

    def close(self):
        if self.bar is not None:
            self.bar.close()


@dataclass(frozen=True)
class EvalTask:
    """One benchmark x mode to generate and score: everything a run needs besides the problems and the
    backend (the defaults live here once). ``generation_key`` names the model and sampling (stale lines of
    another are regenerated); ``program_workers``: generated programs run that many at a time
    (``ProgramExecutor``); ``protocol``: the scorer (``scorers.SCORERS``), chosen once."""

    benchmark: BenchmarkSpec
    mode: str
    sampling: SamplingConfig
    out_path: Path
    pot_timeout_s: float = 5.0
    force_choice_letter: bool = False
    symbolic_math: bool = False
    chunk_size: int = 64
    protocol: str | Scorer = "strict"
    allow_unsafe_exec: bool = False
    generation_key: str = ""
    program_workers: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "benchmark", as_spec(self.benchmark))
        object.__setattr__(self, "out_path", Path(self.out_path))
        if self.mode not in MODES:
            raise ValueError(f"unknown eval mode {self.mode!r}; choose one of {MODES}")
        if self.pot_timeout_s <= 0:
            raise ValueError(f"pot_timeout_s={self.pot_timeout_s:g} would time out every program; give a positive "
                             "number of seconds (eval.pot_timeout_s, the official executor's is 5)")

    @property
    def use_pot(self) -> bool:
        """The first attempt is a program (PoT; the paper's mode on every non-multiple-choice benchmark)."""
        return self.mode == "pot" or (self.mode == "paper" and self.benchmark.answer != "choice")

    def first_prompt(self, p: Problem) -> str:
        if self.use_pot:
            return format_prompt(p.question + POT_SUFFIX)
        return format_prompt(p.question) + (MC_PRIMER if self.benchmark.answer == "choice" else "")


def evaluate_problems(problems: list[Problem], backend, benchmark: str | BenchmarkSpec, mode: str,
                      sampling: SamplingConfig, out_path: str | Path, **options) -> dict:
    """Generate and score what is missing from ``out_path``; return {"n_resumed", "n_dropped_lines", ...}.
    ``options``: the rest of an ``EvalTask`` (pot_timeout_s, protocol, chunk_size, ...)."""
    return run_task(problems, backend, EvalTask(benchmark, mode, sampling, Path(out_path), **options))


def run_task(problems: list[Problem], backend, task: EvalTask) -> dict:
    """``evaluate_problems`` for a built ``EvalTask``: under the generations file's lock."""
    scorer = get_scorer(task.protocol)  # chosen once; nothing below branches on its name
    task.out_path.parent.mkdir(parents=True, exist_ok=True)
    with GenerationsLock(task.out_path):
        return _evaluate_locked(problems, backend, task, scorer)


def _evaluate_locked(problems, backend, task: EvalTask, scorer) -> dict:
    out_path = task.out_path
    done, bad = read_jsonl(out_path)
    expected = {p.id: row_fingerprint(task.generation_key, task.first_prompt(p)) for p in problems}
    key = run_key(task.generation_key, task.pot_timeout_s, task.allow_unsafe_exec)
    walk = walk_chain(out_path, key)
    stale = [r for r in done if r["id"] in expected and r.get("fingerprint") != expected[r["id"]]]
    if stale:
        log.warning("%d line(s) of %s came from another model, sampling setting or prompt; regenerating them",
                    len(stale), out_path)
    stale_ids = {id(r) for r in stale}
    _check_chain(walk, out_path, done, stale_ids)
    if walk.unchained:
        unchained = [r for r in done if r["id"] not in walk.verified and id(r) not in stale_ids]
        if unchained:
            log.warning("%d line(s) of %s were written before generations were hash-chained; regenerating them",
                        len(unchained), out_path)
            stale += unchained
            stale_ids = {id(r) for r in stale}
    old = [r for r in done if r["id"] in expected and id(r) not in stale_ids and scorer.emulates_executor
           and _old_executor(r)]
    if old:
        log.warning("%d line(s) of %s ran their programs under an earlier emulation of the official executor (now "
                    "version %s); regenerating them", len(old), out_path, official.EXECUTOR_VERSION)
        stale += old
    if stale:
        stale_ids = {id(r) for r in stale}
        done = [r for r in done if id(r) not in stale_ids]
    rescored = _rescore_resumed(done, {p.id: p for p in problems}, task, scorer)
    if rescored:
        log.warning("%d resumed line(s) of %s held another ground truth or verdict than the benchmark's current "
                    "answers give; their verdicts are recomputed (the completions are kept)", rescored, out_path)
    ends_cleanly = not out_path.exists() or out_path.stat().st_size == 0 or _last_byte(out_path) == b"\n"
    head = walk.head
    if bad or stale or rescored or not ends_cleanly:  # rewrite: every line whole, the next append starts a line
        tmp = out_path.with_name(out_path.name + ".tmp")
        head = chain_seed(key)
        with open(tmp, "w", encoding="utf-8") as f:
            for r in done:  # every kept line verified above; chained anew, in order
                r["chain"] = head = line_digest(head, r)
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        tmp.replace(out_path)
    done_ids = {r["id"] for r in done}
    if remember := getattr(backend, "remember", None):  # a resumed line's completions serve the other modes too
        for r in done:
            for a in r["attempts"]:
                remember(a["prompt"], task.sampling, a["completion"])
    todo = [p for p in problems if p.id not in done_ids]
    bar = _Progress(len(todo), f"{task.benchmark.name}/{task.mode}")
    t0 = time.time()
    before = dict(getattr(backend, "stats", None) or {})
    with ProgramExecutor(task.pot_timeout_s, task.allow_unsafe_exec, task.program_workers) as programs:
        n_backups, head = _generate_missing(todo, backend, task, scorer, expected, programs, bar, head)
    bar.close()
    return {"n_resumed": len(done_ids), "n_generated": len(todo), "n_dropped_lines": bad, "n_stale_lines": len(stale),
            "n_backup_generations": n_backups, "generation_seconds": round(time.time() - t0, 2),
            "chain": {"format": CHAIN_FORMAT, "run_key": key, "head": head, "lines": len(done) + len(todo)},
            **_throughput(before, getattr(backend, "stats", None))}


VERDICT_KEYS = ("pred", "gt", "correct", "correct_symbolic")


def _rescore_resumed(done: list[dict], problems: dict, task: EvalTask, scorer) -> int:
    """A resumed line's verdict is recomputed, never trusted: its ground truth is set from the benchmark's
    current answer (``gt_raw``) and its answer and verdict from its completions under ``scorer``. Returns how
    many lines changed (in place; the caller rewrites the file and chains them anew)."""
    n = 0
    for r in done:
        p = problems.get(r["id"])
        if p is None:
            continue
        before = {k: r.get(k) for k in ("gt_raw", *VERDICT_KEYS)}
        r["gt_raw"] = p.raw_answer
        r.update(scorer.score_row(task.benchmark, r, task.force_choice_letter))
        if task.symbolic_math and task.benchmark.answer == "math":
            r["correct_symbolic"] = is_equivalent_symbolic(r["pred"], r["gt"]) if r["pred"] else False
        if {k: r.get(k) for k in before} != before:
            n += 1
    return n


def _check_chain(walk: ChainWalk, out_path: Path, done: list[dict], stale_ids: set[int]) -> None:
    """Resume trusts no line after a break in the chain, unless every line there is regenerated anyway
    (another model or sampling: a new seed breaks the chain at its first line)."""
    if walk.broken_at is None:
        return
    if all(id(r) in stale_ids for r in done if r["id"] not in walk.verified):
        return
    raise RuntimeError(f"{out_path} line {walk.broken_at} (id {walk.broken_id}) breaks the generations' hash chain: it "
                       "was edited after it was written, or written under other sandbox settings (pot_timeout_s, "
                       "allow_unsafe_exec); its answers are not resumed -- move the file aside to regenerate them")


def _throughput(before: dict, after: dict | None) -> dict:
    """Tokens generated for this call and the backend's own generation time (programs excluded)."""
    out = {}
    if after and "generated_tokens" in after:
        tokens = after["generated_tokens"] - before.get("generated_tokens", 0)
        secs = after["generate_seconds"] - before.get("generate_seconds", 0.0)
        out = {"generated_tokens": int(tokens), "backend_generate_seconds": round(secs, 3),
               "tokens_per_s": round(tokens / secs, 1) if secs > 0 else None}
    if after and "reused_completions" in after:  # greedy completions another mode of this process generated (GreedyReuse)
        out["reused_completions"] = after["reused_completions"] - before.get("reused_completions", 0)
    return out


def _generate_missing(todo, backend, task: EvalTask, scorer, expected, programs, bar, head) -> tuple[int, str]:
    """Generate, run and score ``todo`` ``task.chunk_size`` at a time, appending each line to the chain."""
    n_backups, benchmark, sampling = 0, task.benchmark, task.sampling
    for s in range(0, len(todo), task.chunk_size):
        batch = todo[s : s + task.chunk_size]
        prompts = [task.first_prompt(p) for p in batch]
        first = make_attempts("pot" if task.use_pot else "cot", prompts, backend.generate(prompts, sampling), programs)
        rows = [{"id": p.id, "fingerprint": expected[p.id], "gt_raw": p.raw_answer, "requested_mode": task.mode,
                 "attempts": [a]} for p, a in zip(batch, first)]
        if task.mode == "paper" and task.use_pot:
            redo = [i for i, a in enumerate(first) if _needs_backup(benchmark, a, task.mode)]
            if redo:
                prompts = [format_prompt(batch[i].question) for i in redo]
                for i, att in zip(redo, make_attempts("cot", prompts, backend.generate(prompts, sampling), programs)):
                    rows[i]["attempts"].append(att)
                n_backups += len(redo)
        with open(task.out_path, "a", encoding="utf-8") as f:
            for r in rows:
                r.update(scorer.score_row(benchmark, r, task.force_choice_letter))
                if task.symbolic_math and benchmark.answer == "math":
                    r["correct_symbolic"] = is_equivalent_symbolic(r["pred"], r["gt"]) if r["pred"] else False
                r["chain"] = head = line_digest(head, r)
                f.write(json.dumps(r, ensure_ascii=False) + "\n")  # one write per line
                f.flush()
        bar.update(len(batch))
    return n_backups, head


def rescore(records: list[dict], benchmark: str | BenchmarkSpec, protocol: str | Scorer,
            force_choice_letter: bool = False) -> list[dict]:
    """The same generations answered by another scorer (nothing is generated or run)."""
    benchmark, scorer = as_spec(benchmark), get_scorer(protocol)
    return [{**r, **scorer.score_row(benchmark, r, force_choice_letter)} for r in records]
