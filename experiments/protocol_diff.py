"""How much each strict-vs-official difference matters on real generations.

    python experiments/protocol_diff.py outputs/eval_smoke/smollm2-135m/*/*/generations.jsonl --out results/protocol_diff.md

Reads generations written by ``numlearn.evaluate`` (any protocol: every line keeps its attempts),
answers each line under both protocols (``rescore``: nothing is generated or run), and counts,
per benchmark, the problems where each documented decision applies and where the two protocols
disagree on the prediction and on correctness.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from numlearn.cli import benchmark_configs
from numlearn.evaluation import official
from numlearn.evaluation.runner import read_jsonl, rescore
from numlearn.evaluation.spec import as_spec, register_benchmarks
from numlearn.records import RESULT, ResultRecord

DECISIONS = {
    "backup_rule": "PoT completion without print( answered from its text (strict re-asks it)",
    "program_wrapper": "program output differs when wrapped as the official executor runs it",
    "choice_program": "multiple-choice completion with print( executed",
    "choice_forced_A": "multiple choice: no letter A-J found -> 'A'",
    "choice_upper": "multiple choice: letter found only after upper-casing",
    "repeated_trigger": "a trigger occurs twice -> first '\\n\\n' chunk only",
    "leading_dot": "'.5'-style number read as '5'",
    "math_boxed_before_trigger": "MATH: \\boxed{} before the last trigger is ignored",
}


def decisions_of(benchmark: str, row: dict) -> set[str]:
    spec = as_spec(benchmark)
    kind = spec.answer
    out = set()
    first = row["attempts"][0]
    texts = [a["completion"] for a in row["attempts"]]
    if first["kind"] == "pot" and first["program"] is None and row["requested_mode"] == "paper":
        out.add("backup_rule")
    for a in row["attempts"]:
        p = a["program"]
        if p and (p["strict"]["ok"], p["strict"]["output"].strip()) != (p["official"]["ok"], p["official"]["output"].strip()):
            out.add("program_wrapper")
        if kind == "choice" and p:
            out.add("choice_program")
    triggers = official.triggers_for(spec)
    if any(t.count(tr) > 1 for t in texts for tr in triggers):
        out.add("repeated_trigger")
    if kind == "choice":
        pred = official.answer_clean(kind, first["completion"], triggers)
        if pred not in official.CHOICE_LETTERS:
            out.add("choice_forced_A")
        elif not re.search(rf"\b{pred}\b", first["completion"]):
            out.add("choice_upper")
    if kind == "number" and any(re.search(r"(?<![\d])\.\d", t) for t in texts):
        out.add("leading_dot")
    if kind == "math" and any("boxed" in t and "boxed" not in re.split("|".join(triggers), t)[-1]
                              and len(re.split("|".join(triggers), t)) > 1 for t in texts):
        out.add("math_boxed_before_trigger")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default=None, help="write the Markdown table here too")
    a = ap.parse_args(argv)
    register_benchmarks(benchmark_configs())  # the result files name their benchmark
    rows_md = []
    total = Counter()
    for f in sorted(a.files):  # a shell glob's order is the locale's: the table is in the path's order
        p = Path(f)
        bench = ResultRecord.read(p.with_name(RESULT)).benchmark_name
        recs, _ = read_jsonl(p)
        s, o = rescore(recs, bench, "strict"), rescore(recs, bench, "official")
        c = Counter()
        for r, rs, ro in zip(recs, s, o):
            c["n"] += 1
            c["pred_differs"] += rs["pred"] != ro["pred"]
            c["correct_differs"] += rs["correct"] != ro["correct"]
            c["strict_correct"] += rs["correct"]
            c["official_correct"] += ro["correct"]
            for d in decisions_of(bench, r):
                c[d] += 1
        total.update(c)
        rows_md.append((bench, c))
    head = ["benchmark", "n", "strict acc", "official acc", "pred differs", "verdict differs", *DECISIONS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench, c in rows_md + [("all", total)]:
        lines.append("| " + " | ".join([bench, str(c["n"]), f"{c['strict_correct']}/{c['n']}",
                                        f"{c['official_correct']}/{c['n']}", str(c["pred_differs"]),
                                        str(c["correct_differs"]), *(str(c[d]) for d in DECISIONS)]) + " |")
    legend = [f"- `{k}`: {v}" for k, v in DECISIONS.items()]
    import platform
    import shlex
    import time

    from numlearn.provenance import git_info

    g = git_info()
    first = ResultRecord.read(Path(sorted(a.files)[0]).with_name(RESULT)).to_dict()
    head = [f"- command: `python {' '.join(shlex.quote(x) for x in sys.argv)}`",
            f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; git: {g['commit']}{' (dirty)' if g['dirty'] else ''}; "
            f"machine: {platform.platform()}",
            f"- generations: model {first.get('model_path')}, backend {first.get('backend', {}).get('backend')}, "
            f"sampling {first.get('sampling')}", ""]
    text = "\n".join(head + lines + ["", "Decision columns count the problems where the decision applies:",
                                     *legend]) + "\n"
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
