"""Are the pretrained start's bases the models Table 1 reports? (issue 27, docs/what_del_does.md)

    python experiments/check_bases.py --seeds 8            # outputs/ and results/runs by default

Run dirs are local, so ``make pretrained-tiny`` retrains each seed's MLE base (Table 1's recipe)
where ``outputs/`` lacks it. This scores each base's ``final/`` teacher forced on the synthetic test
split's first 200 solutions -- the records Table 1's ``eval.teacher_forced`` names
(``preset_records``), whose metrics every Table 1 result file records under ``run.heldout`` -- and
compares them with the committed Table 1 MLE result of that seed. Equal to the printed precision
means the fine-tunes start from the model whose accuracy Table 1 reports; a difference says the base
was retrained into another model (another machine, library or code).
Exit status 1 when any seed differs by more than ``--tol``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
KEYS = ("ce", "digit_acc", "digit_nll")
BASE_RUN = "table1_tiny/tiny/mle/alpha=0.0"


def stored_heldout(store: Path, seed: int) -> dict:
    path = store / BASE_RUN / f"seed={seed}" / "eval" / "synthetic_test" / "cot" / "result.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no stored Table 1 MLE result for seed {seed} (make reproduce-table1 "
                                "SEEDS=8 REUSE=1 writes it)")
    return json.loads(path.read_text())["run"]["heldout"]


def base_heldout(outputs: Path, seed: int, records: list[dict], max_length: int = 512) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from numlearn.evaluation.teacher_forced import heldout_metrics

    final = outputs / BASE_RUN / f"seed={seed}" / "final"
    if not final.is_dir():
        raise FileNotFoundError(f"{final}: the base of seed {seed} is not trained (make pretrained-tiny trains it)")
    tok = AutoTokenizer.from_pretrained(final)
    model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32).eval()
    with torch.no_grad():
        return heldout_metrics(model, tok, records, max_length)


def compare(mine: dict, stored: dict, tol: float) -> tuple[bool, dict]:
    diff = {k: abs(float(mine[k]) - float(stored[k])) for k in KEYS}
    return all(d <= tol for d in diff.values()), diff


def main(argv=None) -> int:
    from numlearn.cli import preset_config
    from numlearn.evaluation.teacher_forced import preset_records
    from numlearn.pipeline import parse_seeds

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="8", help="a count (8 = 0..7), a range (3-7) or a list (0,2,5)")
    ap.add_argument("--outputs", type=Path, default=REPO / "outputs")
    ap.add_argument("--store", type=Path, default=REPO / "results" / "runs")
    ap.add_argument("--cache", type=Path, default=REPO / "data_cache")
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    seeds = parse_seeds(a.seeds)
    # the records (and length cap) Table 1's result files were measured on: its eval.teacher_forced
    cfg = preset_config("table1_tiny", [f"paths.cache_dir={a.cache}"])
    records = preset_records(cfg)
    max_length = int(cfg.eval.teacher_forced.max_length)
    print("| seed | " + " | ".join(f"{k} (base / Table 1)" for k in KEYS) + " | same |")
    print("|---|" + "---|" * (len(KEYS) + 1))
    bad = []
    for s in seeds:
        mine, stored = base_heldout(a.outputs, s, records, max_length), stored_heldout(a.store, s)
        same, _ = compare(mine, stored, a.tol)
        bad += [] if same else [s]
        print(f"| {s} | " + " | ".join(f"{mine[k]:.6f} / {float(stored[k]):.6f}" for k in KEYS)
              + f" | {'yes' if same else 'NO'} |")
    if bad:
        print(f"check_bases: seeds {bad} differ from Table 1's stored MLE by more than {a.tol}: their fine-tunes "
              "start from another model than the one Table 1 reports", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
