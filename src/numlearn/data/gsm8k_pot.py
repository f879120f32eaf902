"""GSM8K-train as programs (PoT), derived offline from the solutions' calculator annotations.

    python -m numlearn.data.gsm8k_pot --out FILE [--data-dir DIR] [--report FILE.json]

The paper fine-tunes on MathInstruct, which mixes chain-of-thought answers with programs; MathInstruct needs
the hub. GSM8K's solutions carry the arithmetic of every step as ``<<48/2=24>>``, so each solution becomes a
short program in the PoT answer format the evaluator runs as written -- the steps as named variables, a later
step that reuses an earlier result naming its variable, and one ``print`` of the answer::

    clips_may = 48 / 2
    clips_altogether = 48 + clips_may
    print(clips_altogether)

The rule (deterministic; ``derive``):

1. each annotation, in order, is a step: its expression (digits, ``+ - * / ( )`` and ``%`` as in ``20%``,
   checked through ``ast``: nothing else is ever written into a program), named from the words after its
   result in the solution (``24 clips in May`` -> ``clips_may``; ``step3`` where none fit), unique, not a
   keyword or builtin;
2. a number in a later expression that equals an earlier step's computed value exactly is that step's
   variable (the most recent such step);
3. the answer is the last step whose value equals the gold answer (``#### N``); only the steps it depends
   on are kept, and the program prints it;
4. every program is run as a script in the sandbox (``numlearn.sandbox``) and kept only when what it prints
   is the gold answer, as a number.

A solution is dropped, and counted by reason, when it has no annotation, an annotation is not plain
arithmetic, no step reaches the gold answer, or the program's run does not print it. Each kept record is
``{"instruction": question + " Let's write a program.", "output": program}``, MathInstruct's fields, so
``data.source=local`` reads it; the instruction carries the evaluator's PoT trigger (``POT_SUFFIX``), so the
training prompt is the evaluator's PoT prompt.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import keyword
import logging
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .prompts import POT_SUFFIX

log = logging.getLogger(__name__)

SOURCE = "train/gsm8k/train.jsonl"  # under the data root (conf/data/gsm8k.yaml)
VERSION = "numlearn.data.gsm8k_pot@v1"  # the rule above; a change of rule is a new version (and cache key)
_ANNOTATION = re.compile(r"<<([^=<>]*)=([^<>]*)>>")
_NUMBER = re.compile(r"(?<![\w.])(\d+\.?\d*|\.\d+)(%?)")
_STOP = frozenset("""a an the of in on at to for from by with and or but so than then that this these those is are
was were be been being has have had do does did it its he she they them their his her him we you your our i me my
per each every all total altogether more less left remaining now after before there here which who what how much
many as if into out up down over also just still only same other another one two three four five six seven eight
nine ten""".split())
DROP_REASONS = ("no calculator annotation", "an annotation is not plain arithmetic", "no step gives the gold answer",
                "the program does not print the gold answer")


@dataclass
class Derivation:
    """The kept records and, per reason, how many solutions were dropped (``DROP_REASONS``)."""

    records: list[dict] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # each kept record's index in the source file
    dropped: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # reason -> the first dropped solution's index
    total: int = 0
    isolation: str = ""

    def report(self) -> dict:
        return {"version": VERSION, "source": SOURCE, "total": self.total, "kept": len(self.records),
                "dropped": {r: self.dropped.get(r, 0) for r in DROP_REASONS},
                "first_dropped_index": dict(self.examples), "isolation": self.isolation}


def gold_number(answer: str) -> float | None:
    """The number after ``####`` (commas removed), or None."""
    tail = answer.rsplit("####", 1)[-1].strip().replace(",", "")
    try:
        return float(tail)
    except ValueError:
        return None


def _python_expr(expr: str) -> str | None:
    """An annotation's expression as Python (``20%`` -> ``20 / 100``, ``05`` -> ``5``), or None unless it is
    plain arithmetic: numbers, ``+ - * / // % **``, unary signs and parentheses."""
    def number(m: re.Match) -> str:
        n = m.group(1)
        n = n.lstrip("0") or "0" if "." not in n else n
        n = ("0" + n) if n.startswith(".") else n
        return f"({n} / 100)" if m.group(2) else n

    py = _NUMBER.sub(number, expr.replace(",", "").strip())
    try:
        tree = ast.parse(py, mode="eval")
    except SyntaxError:
        return None
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div,
               ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)) or not py:
        return None
    if any(isinstance(n, ast.Constant) and not isinstance(n.value, (int, float)) for n in ast.walk(tree)):
        return None
    return py


def _value(py: str, env: dict[str, float]) -> float | None:
    """The value of a checked expression (``_python_expr`` output with step names), computed over the AST: the
    derivation's own arithmetic, never ``eval``. None where it is not finite or not computable."""
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b if abs(b) <= 64 else math.inf}

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return env[n.id]
        if isinstance(n, ast.UnaryOp):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        return ops[type(n.op)](ev(n.left), ev(n.right))

    try:
        v = float(ev(ast.parse(py, mode="eval")))
    except (ZeroDivisionError, OverflowError, KeyError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def step_name(after: str, taken: set[str], k: int) -> str:
    """A variable name from the words after a step's result (``clips in May.`` -> ``clips_may``): up to two
    content words, lower case; ``step<k>`` when none fit; never a keyword, builtin or a name already taken."""
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", after.split(".")[0].split(",")[0])[:6]]
    words = [w for w in words if w not in _STOP and len(w) > 1][:2]
    name = "_".join(words) or f"step{k}"
    if keyword.iskeyword(name) or hasattr(builtins, name) or name[0].isdigit():
        name = f"{name}_"
    base, i = name, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def _substitute(py: str, steps: list[tuple[str, str, float]]) -> str:
    """Each number in ``py`` equal to an earlier step's value (exactly) -> that step's name (the latest one)."""
    def repl(m: re.Match) -> str:
        try:
            v = float(m.group(0))
        except ValueError:
            return m.group(0)
        for name, _, val in reversed(steps):
            if val == v:
                return name
        return m.group(0)

    return re.sub(r"(?<![\w.])\d+\.?\d*(?![\w.])", repl, py)


def program_of(answer: str) -> tuple[str | None, str | None]:
    """(program, None) for one GSM8K solution, or (None, the drop reason of ``DROP_REASONS``)."""
    gold = gold_number(answer)
    found = [(m, line) for line in answer.split("\n") for m in _ANNOTATION.finditer(line)]
    if not found:
        return None, DROP_REASONS[0]
    steps: list[tuple[str, str, float]] = []  # (name, python expression over earlier names, value)
    for k, (m, line) in enumerate(found, 1):
        py = _python_expr(m.group(1))
        if py is None:
            return None, DROP_REASONS[1]
        py = _substitute(py, steps)
        val = _value(py, {n: v for n, _, v in steps})
        if val is None:
            return None, DROP_REASONS[1]
        after = line[m.end():].lstrip()
        after = after[len(m.group(2).strip()):] if after.startswith(m.group(2).strip()) else after
        steps.append((step_name(after, {n for n, _, _ in steps}, k), py, val))
    hit = [i for i, (_, _, v) in enumerate(steps) if gold is not None and _same(v, gold)]
    if not hit:
        return None, DROP_REASONS[2]
    last = hit[-1]
    need, todo = {steps[last][0]}, [steps[last][1]]
    while todo:  # the steps the answer depends on
        for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", todo.pop()):
            if n not in need:
                need.add(n)
                todo.append(next(e for s, e, _ in steps if s == n))
    lines = [f"{n} = {' '.join(_spaced(e))}" for n, e, _ in steps[: last + 1] if n in need]
    return "\n".join([*lines, f"print({steps[last][0]})"]), None


def _spaced(py: str) -> list[str]:
    """``48/2`` -> ``48 / 2``: the binary operators spaced as a person writes them (unary signs kept)."""
    out = re.sub(r"(?<=[\w)])\s*(\*\*|//|[+\-*/%])\s*", r" \1 ", py)
    return [out.strip()]


def prints_gold(output: str, answer: str) -> bool:
    """What a program printed is the gold answer as a number (``24.0`` for ``24``)."""
    gold = gold_number(answer)
    try:
        return gold is not None and _same(float(output.strip().splitlines()[-1]), gold)
    except (ValueError, IndexError):
        return False


# programs run in one sandboxed interpreter, each as a script of its own (fresh globals, its stdout captured)
_DRIVER = """import contextlib, io, json
out = []
for code in json.loads({payload!r}):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<program>", "exec"), {{"__name__": "__main__"}})
        out.append(buf.getvalue())
    except Exception as e:
        out.append("error: " + type(e).__name__)
print(json.dumps(out))
"""


def run_programs(programs: list[str], allow_unsafe: bool = False, chunk: int = 500) -> tuple[list[str], str]:
    """Each program run as a script in the sandbox (``numlearn.sandbox.run_program``), ``chunk`` of them per
    sandboxed interpreter: what each printed, and how they were isolated."""
    from numlearn.sandbox import isolation_status, run_program

    isolated, how = isolation_status()
    outputs = []
    for s in range(0, len(programs), chunk):
        batch = programs[s : s + chunk]
        r = run_program(_DRIVER.format(payload=json.dumps(batch)), timeout_s=120.0, memory_mb=1024,
                        max_output_bytes=64 * 1024 * 1024, allow_unsafe=allow_unsafe)
        if not r.ok:
            raise RuntimeError(f"the sandboxed run of programs {s}..{s + len(batch) - 1} failed: {r.error}")
        outputs += json.loads(r.stdout)
    return outputs, how if isolated else f"process (unsafe): {how}"


def derive(records: list[dict], allow_unsafe: bool = False) -> Derivation:
    """The programs of GSM8K records (``question`` / ``answer``), each checked by running it (``run_programs``)."""
    d = Derivation(total=len(records))
    candidates = []
    for i, r in enumerate(records):
        prog, why = program_of(r["answer"])
        if prog is None:
            d.dropped[why] += 1
            d.examples.setdefault(why, i)
        else:
            candidates.append((i, r, prog))
    outputs, d.isolation = run_programs([p for _, _, p in candidates], allow_unsafe) if candidates else ([], "")
    for (i, r, prog), out in zip(candidates, outputs):
        if prints_gold(out, r["answer"]):
            d.records.append({"instruction": r["question"] + POT_SUFFIX, "output": prog})
            d.indices.append(i)
        else:
            d.dropped[DROP_REASONS[3]] += 1
            d.examples.setdefault(DROP_REASONS[3], i)
    return d


def read_gsm8k(path: str | Path) -> list[dict]:
    from .files import DataError, read_records

    recs = read_records(path)
    for i, r in enumerate(recs, 1):
        if not (isinstance(r.get("question"), str) and isinstance(r.get("answer"), str) and "####" in r["answer"]):
            raise DataError(f"{path}:{i}: not a GSM8K record (question, and an answer ending in '#### N')")
    return recs


def cached_programs(path: str | Path, cache_dir: str | Path) -> dict[int, dict]:
    """The derivation of the GSM8K file at ``path`` as ``{index in the file: record}``, made once and cached under
    ``cache_dir/gsm8k_pot/`` keyed by the file's sha256 and ``VERSION`` (beside it: the counts). The programs run
    in the OS sandbox where there is one, else under process limits (they are arithmetic the rule wrote, not a
    model's code); the cached counts say which."""
    import hashlib

    from numlearn.rundirs import file_sha256
    from numlearn.sandbox import isolation_status

    digest = file_sha256(path)
    key = hashlib.sha256(f"{VERSION}\n{digest}".encode()).hexdigest()[:16]
    cached = Path(cache_dir) / "gsm8k_pot" / f"{key}.json"
    if cached.is_file():
        try:
            data = json.loads(cached.read_text())
            return {int(i): r for i, r in zip(data["indices"], data["records"])}
        except (ValueError, KeyError, TypeError):
            log.warning("%s is damaged; deriving the programs again", cached)
    d = derive(read_gsm8k(path), allow_unsafe=not isolation_status()[0])
    rep = d.report()
    log.info("GSM8K programs: %d of %d kept (%s); run in %s", rep["kept"], rep["total"],
             ", ".join(f"{n} {r}" for r, n in rep["dropped"].items() if n), rep["isolation"])
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(cached.name + ".tmp")
    tmp.write_text(json.dumps({"report": {**rep, "source_sha256": digest}, "indices": d.indices,
                               "records": d.records}))
    tmp.replace(cached)
    return dict(zip(d.indices, d.records))


def write_jsonl(records: list[dict], out: str | Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(prog="python -m numlearn.data.gsm8k_pot", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="the JSONL to write (instruction / output per line)")
    ap.add_argument("--data-dir", type=Path, default=Path(os.environ.get("NUMLEARN_DATA_DIR") or "data"),
                    help=f"the data root holding {SOURCE} (`make data`; default NUMLEARN_DATA_DIR or ./data)")
    ap.add_argument("--report", type=Path, default=None, help="also write the counts as JSON here")
    ap.add_argument("--allow-unsafe-exec", action="store_true",
                    help="run the programs with process limits only where the OS sandbox is missing (recorded)")
    a = ap.parse_args(argv)
    from numlearn.sandbox import SandboxUnavailable

    from .files import DataError

    src = a.data_dir / SOURCE
    try:
        d = derive(read_gsm8k(src), allow_unsafe=a.allow_unsafe_exec)
    except (DataError, SandboxUnavailable, RuntimeError) as e:
        print(f"numlearn.data.gsm8k_pot: error: {e}", file=sys.stderr)
        return 2
    write_jsonl(d.records, a.out)
    rep = d.report()
    if a.report:
        a.report.write_text(json.dumps(rep, indent=1) + "\n")
    print(f"numlearn.data.gsm8k_pot: {rep['kept']} of {rep['total']} GSM8K-train solutions as programs -> {a.out}; "
          "dropped: " + ", ".join(f"{n} ({r})" for r, n in rep["dropped"].items()) + f"; run in: {rep['isolation']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
