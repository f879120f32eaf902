"""Does a short fine-tune on GSM8K-train's CoT + PoT mix teach Qwen2.5-Coder-0.5B the program format (issue 64)?

    python experiments/pot_format.py [--steps N] [--limit N]   # -> results/pot_format/format.md, format.json
    python experiments/pot_format.py --steps 60 --override train.learning_rate=2e-5 --name lr2e-5
                                     # another recipe: its own outputs/pot_format/lr2e-5 and results/pot_format/lr2e-5

The base model (``data_cache/qwen-coder/hf``, ``python experiments/qwen_coder.py assemble``) and its top-layer
fine-tune on ``data=gsm8k_mix`` (``experiment=qwen_coder_mix``: MLE, the first 40 problems of GSM8K-train held
out) are each evaluated on that held-out slice, CoT and PoT, with the hf backend and the ``strict`` protocol (the
completion run as written). Reported per model: PoT completions that hold a program, programs that run without an
error, PoT accuracy, CoT accuracy, and the generation throughput. Every step resumes (the training's run dir,
the evaluations' generations), so an interrupted run continues where it stopped. One seed, 40 problems: whether
the format is learned, not how well the model reasons.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "data_cache" / "qwen-coder" / "hf"
EXPERIMENT = "qwen_coder_mix"


def _run(cmd: list[str]) -> None:
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)


def _cells(eval_dir: Path) -> dict:
    """Per mode: n, accuracy, and for PoT how many first attempts hold a program and how many ran cleanly."""
    out = {}
    for mode in ("cot", "pot"):
        d = eval_dir / "gsm8k_train" / mode
        res = json.loads((d / "result.json").read_text())
        lines = [json.loads(x) for x in (d / "generations.jsonl").read_text().split("\n") if x.strip()]
        first = [r["attempts"][0] for r in lines]
        progs = [a["program"] for a in first if a.get("program")]
        gen = res["generation"]
        out[mode] = {"n": res["metrics"]["n"], "accuracy": res["metrics"]["accuracy"],
                     "correct": sum(bool(v) for v in res["correct_by_id"].values()),
                     "with_program": len(progs), "program_ran": sum(bool(p["strict"]["ok"]) for p in progs),
                     "fenced": sum("```" in a["completion"] for a in first),
                     "tokens_per_s": gen.get("tokens_per_s"), "generated_tokens": gen.get("generated_tokens"),
                     "generation_seconds": gen.get("generation_seconds"), "result": str(d.relative_to(REPO))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--limit", type=int, default=40, help="held-out problems (= data.skip_per_file)")
    ap.add_argument("--outputs", type=Path, default=REPO / "outputs" / "pot_format")
    ap.add_argument("--results", type=Path, default=REPO / "results" / "pot_format")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a Hydra override of the fine-tune's recipe (train.learning_rate=2e-5); give it a --name")
    ap.add_argument("--name", default=None, help="the recipe's name: its own outputs and results subdirectory")
    a = ap.parse_args(argv)
    if a.override and not a.name:
        ap.error("--override changes the recipe: give it a --name (its own run dir and results)")
    base_outputs = a.outputs  # the base model's evaluation is one for every recipe: evaluated (and resumed) once
    if a.name:
        a.outputs, a.results = a.outputs / a.name, a.results / a.name
    if not (BASE / "config.json").is_file():
        _run([sys.executable, "experiments/qwen_coder.py", "assemble"])
    common = [f"experiment={EXPERIMENT}", f"paths.output_dir={a.outputs}", f"eval.limit={a.limit}",
              f"data.skip_per_file={a.limit}", f"train.max_steps={a.steps}", *a.override]
    t0 = time.time()
    base = [f"paths.output_dir={base_outputs}" if c.startswith("paths.output_dir=") else c for c in common]
    _run([sys.executable, "-m", "numlearn.evaluate", *base, f"model_path={BASE}"])
    t_base = time.time() - t0
    _run([sys.executable, "-m", "numlearn.train", *common])
    t_train = time.time() - t0 - t_base
    _run([sys.executable, "-m", "numlearn.evaluate", *common])
    from hydra import compose, initialize_config_dir

    from numlearn.provenance import provenance
    from numlearn.schema import default_eval_dir, register

    register()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("evaluate", overrides=common)
    base_dir = Path(default_eval_dir(str(BASE), str(cfg.run_dir), str(base_outputs)))
    tuned_dir = Path(str(cfg.run_dir)) / "eval"
    run = json.loads((Path(str(cfg.run_dir)) / "run.json").read_text())
    cells = {"base": _cells(base_dir), "mix fine-tune": _cells(tuned_dir)}
    cmd = f"python experiments/pot_format.py --steps {a.steps} --limit {a.limit}" + "".join(
        f" --override {o}" for o in a.override) + (f" --name {a.name}" if a.name else "")
    a.results.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    (a.results / "format.json").write_text(json.dumps({
        "command": cmd, "cells": cells, "train": {"steps": a.steps, "recipe": run.get("recipe"),
                                                  "records": run.get("data"), "inputs": run.get("inputs"),
                                                  "train_runtime_s": run.get("train_runtime_s")},
        "seconds": {"base_eval": round(t_base, 1), "train": round(t_train, 1)}, **prov}, indent=1) + "\n")
    rows = ["| model | PoT: with a program | PoT: program ran | PoT: fenced | PoT accuracy | CoT accuracy | tokens/s (PoT, CoT) |",
            "|---|---|---|---|---|---|---|"]
    for name, c in cells.items():
        p, q = c["pot"], c["cot"]
        rows.append(f"| {name} | {p['with_program']}/{p['n']} | {p['program_ran']}/{p['n']} | {p['fenced']}/{p['n']} | "
                    f"{p['correct']}/{p['n']} ({100 * p['accuracy']:.1f} %) | {q['correct']}/{q['n']} "
                    f"({100 * q['accuracy']:.1f} %) | {p['tokens_per_s']}, {q['tokens_per_s']} |")
    md = ["<!-- generated by experiments/pot_format.py; do not edit by hand -->",
          f"- command: `{cmd}`", f"- git: {prov['git']['commit']}",
          f"- machine: {prov.get('environment', {}).get('platform', '?')}, "
          f"{prov.get('environment', {}).get('cpu_count', '?')} CPUs",
          f"- held out: the first {a.limit} problems of GSM8K-train (`eval=gsm8k_heldout`), never trained on "
          f"(`data.skip_per_file={a.limit}`); hf backend, fp32, greedy, generations capped at 256 tokens; "
          "protocol `strict` (a PoT completion is run as written)",
          f"- fine-tune: `experiment={EXPERIMENT}` (MLE, top 4 layers, {a.steps} steps of 4 examples from "
          f"`data=gsm8k_mix`, learning rate {run.get('recipe', {}).get('train', {}).get('learning_rate')}), "
          f"{run.get('train_runtime_s')} s; one seed", "",
          *rows, "",
          "`with a program`: the first attempt's completion holds `print(`; `program ran`: it exits without an error "
          "in the sandbox; `fenced`: the completion holds a Markdown code fence, which the paper's protocol runs "
          "as Python (a SyntaxError)."]
    (a.results / "format.md").write_text("\n".join(md) + "\n")
    print(f"pot_format: wrote {a.results / 'format.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
