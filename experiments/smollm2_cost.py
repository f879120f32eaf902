"""What one SmolLM2-135M-Instruct run of the pretrained-start study costs on this machine (issue 27):
measured before any run, so the decision to run the rows -- or the reason not to -- rests on a figure.

    python experiments/smollm2_cost.py                  # make smollm2-cost -> results/smollm2_cost/cost.{md,json}
    python experiments/smollm2_cost.py --from-json results/smollm2_cost/cost.json   # the table again, no timing

Through the real code paths (``numlearn.training.run.train`` and ``numlearn.evaluation.recipe.run_evaluation``,
``experiment=smollm2_synthetic``):

* seconds per optimizer step, every layer training and only the top ``--top`` decoder layers
  (``train.trainable_layers``): two runs of ``--steps`` A and B steps each, (t_B - t_A) / (B - A) of
  the trainer's own runtime, so start-up and the first slow steps cancel; the start-up (loading,
  tokenising, saving) is the rest of the A-step run's wall time;
* seconds per problem of CoT generation on the synthetic test split, GSM8K and SVAMP: the first
  ``--problems`` of each in one batch (a real run batches ``eval.batch_size`` = 25, so this is at
  most the per-problem time it will see), plus the evaluation's fixed cost (loading, teacher-forced
  metrics).

Then the projected minutes of each candidate recipe (steps x layers x problems per benchmark) against
the issue's budget (20 minutes a run on 2 cores), and the study's total (rows x seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = ("synthetic_test", "gsm8k", "svamp")
# (steps, trainable layers or None for all, problems per benchmark): the study's recipes, informative first
RECIPES = ((200, None, 200), (200, 6, 200), (200, None, 50), (200, 6, 50), (100, None, 30), (100, 6, 30))
BUDGET_MIN = 20.0
RUNS = 9  # rows MLE, DEL 1.28, the best DEL variant x 3 seeds


def _compose(overrides: list[str], name: str = "config"):
    from hydra import compose, initialize_config_dir

    from numlearn.schema import register

    register()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return compose(name, overrides=overrides)


def measure(out: Path, steps: tuple[int, int], top: int, problems: int, data_dir: str, assets_dir: str) -> dict:
    from numlearn.evaluation.recipe import run_evaluation
    from numlearn.training.run import train

    common = ["experiment=smollm2_synthetic", f"paths.output_dir={out}", f"paths.data_dir={data_dir}",
              f"paths.assets_dir={assets_dir}", "train.save_steps=100000", "train.logging_steps=1"]
    train_cost = {}
    for layers in (None, top):
        runtimes, walls = {}, {}
        for k in steps:
            cfg = _compose([*common, f"train.max_steps={k}", f"experiment_name=cost_{layers or 'all'}_{k}",
                            f"train.trainable_layers={'null' if layers is None else layers}"])  # the preset's: 6
            t0 = time.perf_counter()
            run_dir = train(cfg)
            walls[k] = time.perf_counter() - t0
            runtimes[k] = json.loads((run_dir / "run.json").read_text())["train_runtime_s"]
            print(f"[cost] layers={layers or 'all'} {k} steps: trainer {runtimes[k]:.1f} s, call {walls[k]:.1f} s",
                  flush=True)
        a, b = steps
        per_step = (runtimes[b] - runtimes[a]) / (b - a)
        train_cost["all" if layers is None else str(layers)] = {
            "s_per_step": round(per_step, 3), "startup_s": round(walls[a] - a * per_step, 1),
            "trainer_runtime_s": {str(k): v for k, v in runtimes.items()}}
    # generation: the last model trained (top layers, B steps), the three benchmarks, one batch each
    cfg = _compose([*common, f"train.max_steps={steps[1]}", f"experiment_name=cost_{top}_{steps[1]}",
                    f"train.trainable_layers={top}", f"eval.limit={problems}", f"eval.batch_size={problems}"],
                   name="evaluate")
    t0 = time.perf_counter()
    paths = run_evaluation(cfg)
    wall = time.perf_counter() - t0
    gen = {}
    for p in paths:
        r = json.loads(Path(p).read_text())
        n = int(r["metrics"]["n"])
        gen[r["benchmark"]["name"]] = {"s_per_problem": round(float(r["wall_seconds"]) / n, 3), "n": n,
                                       "accuracy": r["metrics"].get("accuracy")}
    gen_total = sum(g["s_per_problem"] * g["n"] for g in gen.values())
    return {"train": train_cost, "generation": gen, "eval_fixed_s": round(wall - gen_total, 1),
            "eval_wall_s": round(wall, 1), "steps": list(steps), "top": top, "problems": problems}


def project(m: dict) -> list[dict]:
    rows = []
    for steps, layers, n in RECIPES:
        layers = m["top"] if layers is not None else None
        t = m["train"]["all" if layers is None else str(layers)]
        train_s = t["startup_s"] + steps * t["s_per_step"]
        eval_s = m["eval_fixed_s"] + sum(n * g["s_per_problem"] for g in m["generation"].values())
        minutes = (train_s + eval_s) / 60
        rows.append({"steps": steps, "layers": "all" if layers is None else f"top {layers}", "problems": n,
                     "train_min": round(train_s / 60, 1), "eval_min": round(eval_s / 60, 1),
                     "run_min": round(minutes, 1), "fits": minutes <= BUDGET_MIN,
                     "study_h": round(RUNS * minutes / 60, 1)})
    return rows


def report(m: dict, command: str, out: Path) -> str:
    from numlearn.reporting.aggregate import header

    lines = [header(command, tool="experiments/smollm2_cost.py", out_dir=out), "",
             f"## Measured (2 cores, `experiment=smollm2_synthetic`, batch 8 x {256} tokens)", "",
             "| what | figure |", "|---|---|"]
    for k, t in m["train"].items():
        lines.append(f"| training, {'every layer' if k == 'all' else f'top {k} layers'} | {t['s_per_step']:.2f} s/step "
                     f"(+ {t['startup_s']:.0f} s start-up) |")
    for name, g in m["generation"].items():
        lines.append(f"| CoT generation, {name} | {g['s_per_problem']:.2f} s/problem ({g['n']} in one batch) |")
    lines.append(f"| evaluation fixed cost (loading, teacher-forced metrics) | {m['eval_fixed_s']:.0f} s |")
    lines += ["", f"## Projected per run (budget {BUDGET_MIN:.0f} min) and for the study ({RUNS} runs)", "",
              "| steps | layers training | problems per benchmark | training (min) | evaluation (min) | run (min) | "
              "fits | study (h) |", "|---|---|---|---|---|---|---|---|"]
    for r in project(m):
        lines.append(f"| {r['steps']} | {r['layers']} | {r['problems']} | {r['train_min']} | {r['eval_min']} | "
                     f"{r['run_min']} | {'yes' if r['fits'] else 'no'} | {r['study_h']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "smollm2_cost")
    ap.add_argument("--steps", default="2,8", help="the two step counts whose runtimes are differenced")
    ap.add_argument("--top", type=int, default=6, help="trainable_layers of the frozen variant")
    ap.add_argument("--problems", type=int, default=10, help="problems per benchmark timed")
    ap.add_argument("--data-dir", default=os.environ.get("NUMLEARN_DATA_DIR") or str(REPO / "data"),
                    help="the data root holding benchmarks/ (make data)")
    ap.add_argument("--assets-dir", default=str(REPO / "assets"))
    ap.add_argument("--from-json", type=Path, default=None, help="rewrite the table from a saved cost.json")
    a = ap.parse_args(argv)
    command = "python experiments/smollm2_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.from_json:
        m = json.loads(a.from_json.read_text())["measured"]
    else:
        import torch

        torch.set_num_threads(2)
        steps = tuple(int(x) for x in a.steps.split(","))
        if len(steps) != 2 or not 0 < steps[0] < steps[1]:
            print("smollm2_cost: --steps A,B with 0 < A < B", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="smollm2-cost-") as tmp:
            m = measure(Path(tmp), steps, a.top, a.problems, a.data_dir, a.assets_dir)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "cost.md").write_text(report(m, command.strip(), a.out))
    from numlearn.provenance import provenance

    (a.out / "cost.json").write_text(json.dumps({"measured": m, "projected": project(m), "budget_min": BUDGET_MIN,
                                                 "runs": RUNS, "command": command.strip(), **provenance()},
                                                indent=1, default=str) + "\n")
    print((a.out / "cost.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
