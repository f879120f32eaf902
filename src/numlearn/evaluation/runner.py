"""Generation (resumable JSONL) and scoring of one benchmark in one mode.

Modes: ``cot`` (chain of thought), ``pot`` (program of thought only) and ``paper`` (the paper's
protocol: PoT first with a CoT backup for open sets, CoT for multiple choice).
Each finished problem is one line of ``generations.jsonl``, appended as soon as its batch is
done; re-running skips the ids already there. ``result.json`` is written from the JSONL.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from numlearn.data.prompts import MC_PRIMER, POT_SUFFIX, format_prompt

from .backends.base import SamplingConfig
from .benchmarks import Problem
from .extract import extract_answer, is_correct, is_equivalent_symbolic
from .metrics import compute_metrics
from .sandbox import run_program

MODES = ("cot", "pot", "paper")


def read_jsonl(path: str | Path) -> tuple[list[dict], int]:
    """Records of a generations file and the number of unreadable lines (a line cut by an
    interruption is dropped and counted, then regenerated)."""
    recs, bad = [], 0
    p = Path(path)
    if not p.exists():
        return recs, 0
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            bad += 1
    return recs, bad


def _program_of(completion: str) -> str | None:
    if "print(" not in completion:
        return None
    return completion.split("### Instruction")[0]


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


def evaluate_problems(problems: list[Problem], backend, benchmark: str, kind: str, mode: str, sampling: SamplingConfig,
                      out_path: str | Path, pot_timeout_s: float = 5.0, force_choice_letter: bool = False,
                      symbolic_math: bool = False, chunk_size: int = 64) -> dict:
    """Generate and score what is missing from ``out_path``; return {"n_resumed", "n_dropped_lines", ...}."""
    if mode not in MODES:
        raise ValueError(f"unknown eval mode {mode!r}; choose one of {MODES}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done, bad = read_jsonl(out_path)
    if bad:  # rewrite without the broken line(s) so the file stays valid JSONL
        with open(out_path, "w", encoding="utf-8") as f:
            for r in done:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    done_ids = {r["id"] for r in done}
    todo = [p for p in problems if p.id not in done_ids]
    mc = kind == "multiple_choice"
    use_pot = (mode == "pot" or (mode == "paper" and not mc))
    bar = _Progress(len(todo), f"{benchmark}/{mode}")
    t0 = time.time()
    n_gen_tokens_chars = 0
    for s in range(0, len(todo), chunk_size):
        batch = todo[s : s + chunk_size]
        rows: list[dict] = []
        if use_pot:
            prompts = [format_prompt(p.question + POT_SUFFIX) for p in batch]
            comps = backend.generate(prompts, sampling)
            for p, prompt, c in zip(batch, prompts, comps):
                row = {"id": p.id, "prompt": prompt, "completion": c, "mode": "pot", "gt": p.answer,
                       "program_output": None, "program_ok": None, "program_error": None}
                code = _program_of(c)
                if code is not None:
                    res = run_program(code, timeout_s=pot_timeout_s)
                    row.update(program_output=res.stdout, program_ok=res.ok, program_error=res.error or None)
                    row["pred"] = extract_answer(benchmark, "The answer is " + res.stdout.strip()) if res.ok else ""
                else:
                    row["pred"] = extract_answer(benchmark, c) if mode == "pot" else ""
                rows.append(row)
            if mode == "paper":
                redo = [i for i, r in enumerate(rows) if r["pred"] == ""]
                if redo:
                    prompts = [format_prompt(batch[i].question) for i in redo]
                    comps = backend.generate(prompts, sampling)
                    for i, prompt, c in zip(redo, prompts, comps):
                        rows[i].update(pot_completion=rows[i]["completion"], prompt=prompt, completion=c,
                                       mode="cot_backup", pred=extract_answer(benchmark, c, force_choice_letter))
        else:
            prompts = [format_prompt(p.question) + (MC_PRIMER if mc else "") for p in batch]
            comps = backend.generate(prompts, sampling)
            for p, prompt, c in zip(batch, prompts, comps):
                rows.append({"id": p.id, "prompt": prompt, "completion": c, "mode": "cot", "gt": p.answer,
                             "pred": extract_answer(benchmark, c, force_choice_letter)})
        with open(out_path, "a", encoding="utf-8") as f:
            for r in rows:
                r["correct"] = is_correct(benchmark, r["pred"], r["gt"])
                if symbolic_math and kind == "open_math":
                    r["correct_symbolic"] = is_equivalent_symbolic(r["pred"], r["gt"]) if r["pred"] else False
                n_gen_tokens_chars += len(r["completion"])
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        bar.update(len(batch))
    bar.close()
    return {"n_resumed": len(done_ids), "n_generated": len(todo), "n_dropped_lines": bad,
            "generation_seconds": round(time.time() - t0, 2)}


def score_file(path: str | Path, kind: str, ids: list[str] | None = None) -> dict:
    recs, bad = read_jsonl(path)
    if ids is not None:
        keep = set(ids)
        recs = [r for r in recs if r["id"] in keep]
    return compute_metrics(recs, kind)
