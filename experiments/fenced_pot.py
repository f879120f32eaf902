"""A secondary, NOT the paper's protocol: the base model's PoT answers with the fenced code block run (issue 64 item 4).

    python experiments/fenced_pot.py --out results/qwen_coder_base/fenced [--from-eval outputs/eval/qwen-coder-base]

The paper's protocol runs a PoT completion as written. Base Qwen2.5-Coder-0.5B-Instruct writes prose around a
fenced ```python block, which then fails as a program. Here, for each PoT completion of the base row's open
benchmarks (the first attempt), the first fenced block alone is run in the OS sandbox (5 s, as the official
executor's limit) and its printed output is scored by the official scorer; a completion without a fenced block
counts as its paper-protocol verdict's program would (no answer). Beside it, the paper protocol's own PoT verdict
of the same line. So a reader can tell format from ability.

``--from-eval`` copies each open benchmark's PoT ``generations.jsonl`` from the base row's evaluation
(``make qwen-coder-base``) into ``<out>/generations/``, less the prompts (no benchmark question is copied: the id,
the reference answer, the paper protocol's verdict and the first completion); every later run (and ``make tables-check``) reads the
committed copies, so the table re-derives from the repository.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)


def fenced_block(completion: str) -> str | None:
    """The first fenced code block's body (a ```python, ```py or bare fence), or None."""
    m = FENCE.search(completion)
    return m.group(1) if m else None


def score_line(line: dict, spec, run) -> dict:
    """One PoT generations line: whether its first attempt holds a fenced block, whether that block ran, the
    answer its output gives under the official scorer, and both verdicts (fenced block; the line's own)."""
    from numlearn.evaluation import official

    att = line["attempts"][0]
    code = fenced_block(att["completion"])
    r = run(code) if code is not None else None
    pred = official.answer_clean(spec.answer, "The answer is " + r["output"].strip("\n"), official.triggers_for(spec)) \
        if r and r["ok"] else ""
    truth = official.truth(spec.loader, line["gt_raw"])
    return {"id": line["id"], "fenced": code is not None, "ran": bool(r and r["ok"]), "pred": pred,
            "correct_fenced": bool(pred != "" and official.is_correct(spec.answer, pred, truth)),
            "correct_paper": bool(line["correct"])}


def sandbox_run(code: str) -> dict:
    from numlearn.sandbox import run_program

    r = run_program(code, timeout_s=5.0)
    return {"ok": r.ok, "output": r.stdout}


def table(rows: dict[str, list[dict]]) -> str:
    from numlearn.reporting.one_model import wilson

    out = ["| benchmark | n | fenced block | fenced block ran | PoT, the paper's protocol (as written) | "
           "PoT, the fenced block run (not the paper's protocol) |", "|---|---|---|---|---|---|"]
    for name, rs in sorted(rows.items()):
        n = len(rs)

        def cell(key, rs=rs, n=n):
            k = sum(r[key] for r in rs)
            lo, hi = wilson(k, n)
            return f"{100 * k / n:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] ({k}/{n})"

        out.append(f"| {name} | {n} | {sum(r['fenced'] for r in rs)} | {sum(r['ran'] for r in rs)} | "
                   f"{cell('correct_paper')} | {cell('correct_fenced')} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "qwen_coder_base" / "fenced")
    ap.add_argument("--from-eval", type=Path, default=None, help="the base row's evaluation dir: copy its PoT "
                                                                  "generations into <out>/generations first")
    ap.add_argument("--command", default="python experiments/fenced_pot.py")
    a = ap.parse_args(argv)
    from numlearn.evaluation.spec import as_spec
    from numlearn.reporting.aggregate import header

    gens = a.out / "generations"
    if a.from_eval is not None:
        gens.mkdir(parents=True, exist_ok=True)
        for f in sorted(a.from_eval.glob("*/pot/generations.jsonl")):  # no prompt: no benchmark question is copied
            keep = [{"id": r["id"], "gt_raw": r["gt_raw"], "correct": r["correct"],
                     "attempts": [{"kind": r["attempts"][0]["kind"], "completion": r["attempts"][0]["completion"]}]}
                    for r in (json.loads(x) for x in f.read_text().splitlines() if x.strip())]
            (gens / f"{f.parent.parent.name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep))
    files = sorted(gens.glob("*.jsonl"))
    if not files:
        print(f"fenced_pot: error: no PoT generations under {gens}; pass --from-eval <the base row's eval dir>",
              file=sys.stderr)
        return 2
    rows = {}
    for f in files:
        spec = as_spec(f.stem)
        lines = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        rows[f.stem] = [score_line(x, spec, sandbox_run) for x in lines]
    text = "\n".join([header(a.command, "experiments/fenced_pot.py", a.out), "",
                      "## PoT with the fenced block run: a secondary, not the paper's protocol", "",
                      "Base Qwen2.5-Coder-0.5B-Instruct's PoT completions (first attempt) on the first 100 problems of "
                      "each open benchmark: the paper's protocol runs the completion as written; here the first fenced "
                      "code block alone is run (OS sandbox, 5 s) and its output scored by the official scorer. "
                      "Accuracy %, 95 % Wilson interval over problems.", "", table(rows), ""])
    (a.out / "fenced.md").write_text(text)
    (a.out / "fenced.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
