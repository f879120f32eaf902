"""How hard the numeric term pulls against CE, in gradient norm rather than loss value (issue 40, item 5).

    python experiments/grad_norms.py --run code=<run dir> --run paper=<run dir> ... --out results/grad_norms

For each run and each of its checkpoints (``checkpoints/checkpoint-<step>`` and ``final``; a run trained with
``train.save_steps`` below its length keeps several, see ``make grad-norms``), teacher forced on the held-out
test solutions of the run's preset (``eval.teacher_forced``: the records its result files use), as one
optimizer step over all of them (the step's token and digit counts, so the normalisations are the training
step's): the gradient of the run's own loss (CE plus alpha x its numeric term, as configured) and of CE alone
(MLE's loss: the same token-mean CE), both over every trainable parameter. The numeric term's gradient is
their difference. Reported: ``||g_num|| / ||g_CE||`` and ``cos(g_num, g_CE)`` (negative: it pulls against
CE). The loss-value ratio ``aux / CE`` is printed beside them for the comparison the docs used to make.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    out = []
    for d in sorted((run / "checkpoints").glob("checkpoint-*")):
        if m := re.fullmatch(r"checkpoint-(\d+)", d.name):
            if (d / "config.json").is_file():
                out.append((int(m.group(1)), d))
    rec = json.loads((run / "run.json").read_text())
    if (run / "final" / "config.json").is_file() and rec.get("global_step") not in [s for s, _ in out]:
        out.append((int(rec.get("global_step") or 0), run / "final"))
    return sorted(out)


def gradient_parts(model_dir: Path, run: Path, records: list[dict], max_length: int, batch_size: int = 32) -> dict:
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from numlearn.data.collate import PadCollator, tokenize_records
    from numlearn.losses import build_loss, step_counts
    from numlearn.training.run import loss_options

    cfg = OmegaConf.load(run / "config.yaml")
    tok = AutoTokenizer.from_pretrained(run / "final")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    loss_fn = build_loss(cfg.loss.name, tok, **loss_options(cfg.loss))
    ce_fn = build_loss("mle", tok, ce_normalization=getattr(loss_fn, "ce_normalization", "token"))
    feats, _ = tokenize_records(records, tok, max_length)
    coll = PadCollator(tok.pad_token_id)
    batches = [coll(feats[i : i + batch_size]) for i in range(0, len(feats), batch_size)]
    counts = step_counts([b["labels"] for b in batches], loss_fn)
    params = [p for p in model.parameters() if p.requires_grad]

    def grad(fn) -> tuple[torch.Tensor, float, float]:
        model.zero_grad(set_to_none=True)
        ce = aux = 0.0
        for b in batches:
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            out = fn(logits, b["labels"], step=counts)
            out.loss.backward()
            ce, aux = ce + float(out.ce), aux + float(out.aux)
        g = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
        return g.clone(), ce, aux

    g_tot, ce, aux = grad(loss_fn)
    g_ce, ce_only, _ = grad(ce_fn)
    g_num = g_tot - g_ce
    n_ce, n_num = float(g_ce.norm()), float(g_num.norm())
    return {"grad_norm_ce": n_ce, "grad_norm_numeric": n_num, "ratio": n_num / n_ce if n_ce else None,
            "cosine": float(torch.nn.functional.cosine_similarity(g_num, g_ce, dim=0)) if n_num and n_ce else None,
            "loss_ce": ce, "loss_aux": aux, "loss_ratio": aux / ce if ce else None,
            "ce_check": abs(ce - ce_only), "n_digits": counts.num_digits_in_batch, "n_tokens": counts.num_items_in_batch}


# make grad-norms: each DEL form at the weight its ablation row runs, seed 0, a checkpoint every 100 steps
FORMS = {"code": ("del", 1.28), "paper": ("del_paper", 1.28), "digit_ce": ("del_ce", 1.28),
         "binary_entropy": ("del_bent", 0.32)}


def train_forms(outputs: Path, experiment: str) -> list[str]:
    """Train (or resume, or find complete) each of ``FORMS`` with checkpoints every 100 steps; ``--run`` specs."""
    import subprocess

    runs = []
    for name, (loss, alpha) in FORMS.items():
        over = [f"experiment={experiment}", f"loss={loss}", f"loss.alpha={alpha}", "seed=0",
                f"paths.output_dir={outputs}", "train.save_steps=100", "train.save_total_limit=20"]
        subprocess.run([sys.executable, "-m", "numlearn.train", *over], check=True, cwd=REPO)
        (run,) = [p.parent for p in (outputs / experiment).glob(f"*/{loss}/alpha={alpha}/seed=0/run.json")]
        runs.append(f"{name}={run}")
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR")
    ap.add_argument("--train", type=Path, default=None, metavar="OUTPUTS",
                    help="train the four DEL forms (FORMS) under OUTPUTS first and measure those (make grad-norms)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--experiment", default="table1_tiny")
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from numlearn.cli import preset_config
    from numlearn.evaluation.teacher_forced import preset_records
    from numlearn.provenance import provenance

    if a.train is not None:
        a.run = train_forms(a.train.resolve(), a.experiment) + a.run
    cfg = preset_config(a.experiment, [f"eval.teacher_forced.n={a.n}"])
    records = preset_records(cfg)
    max_length = int(cfg.eval.teacher_forced.max_length)
    res: dict[str, list[dict]] = {}
    for spec in a.run:
        name, _, path = spec.partition("=")
        run = Path(path)
        if not (run / "run.json").is_file():
            print(f"grad_norms: error: {run} is not a run dir (no run.json)", file=sys.stderr)
            return 2
        for step, d in checkpoints(run):
            t0 = time.time()
            r = {"step": step, **gradient_parts(d, run, records, max_length)}
            if r["ce_check"] > 1e-4 * max(r["loss_ce"], 1.0):
                print(f"grad_norms: error: {name} step {step}: the loss's CE part {r['loss_ce']} is not MLE's "
                      f"{r['loss_ce'] - r['ce_check']}: the split into CE and numeric term would be wrong", file=sys.stderr)
                return 2
            res.setdefault(name, []).append(r)
            print(f"[grad_norms] {name} step {step}: ||g_num||/||g_CE|| = {r['ratio']:.3f}, cos = {r['cosine']:+.3f}, "
                  f"aux/CE (loss values) = {r['loss_ratio']:.3f} ({time.time() - t0:.1f}s)", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    cmd = "python experiments/grad_norms.py " + " ".join(sys.argv[1:] if argv is None else argv)
    prov = provenance()
    (a.out / "grad_norms.json").write_text(json.dumps({"command": cmd, "experiment": a.experiment, "n": len(records),
                                                       "runs": res, **prov}, indent=1) + "\n")
    lines = ["<!-- generated by experiments/grad_norms.py; do not edit by hand -->", f"- command: `{cmd}`",
             f"- git: {prov['git']['commit']}", f"- held-out: the {a.experiment} preset's teacher-forced records, "
             f"first {len(records)}, as one step", "",
             "| run | step | numeric / CE, gradient norm | cos(numeric, CE) | aux / CE, loss value |", "|---|---|---|---|---|"]
    for name, rows in res.items():
        for r in rows:
            lines.append(f"| {name} | {r['step']} | {r['ratio']:.3f} | {r['cosine']:+.3f} | {r['loss_ratio']:.3f} |")
    (a.out / "grad_norms.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
