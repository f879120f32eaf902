"""Every study's in-family comparisons held to one project-wide family (issue 61 item 1).

Each study Holm-corrects within its own declared family (``robustness.csv``). This pools every in-family
comparison with a verdict (>= 5 seeds) across the studies the README and docs/what_del_does.md quote, Holm-adjusts
both p-values (bootstrap and paired t) over the pooled family, and lists each comparison that is significant in
its own study and whether it still is in the pooled one. Reads the committed tables only.

    python experiments/one_family.py [--out results/families]     # -> families.md, families.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from numlearn.reporting.aggregate import header
from numlearn.reporting.stats import holm

REPO = Path(__file__).resolve().parents[1]
# the studies whose verdicts the README and docs quote (unswept_seeds repeats Table 1's fresh-seed rows; the tuned-MLE
# tables restate others against another baseline), each once
STUDIES = ("table1_tiny", "ablation_tiny", "chunked_tiny", "pretrained_tiny", "smollm2_synthetic", "smollm2_gsm8k",
           "mle_lr_tiny")
ALPHA = 0.05
MIN_SEEDS = 5


def pooled(results: Path = REPO / "results") -> pd.DataFrame:
    """The in-family comparisons with a verdict, each study's Holm p beside the pooled family's."""
    frames = []
    for study in STUDIES:
        t = pd.read_csv(results / study / "robustness.csv")
        t = t[t["in_family"].astype(bool) & (t["n_seeds"] >= MIN_SEEDS)].copy()
        t.insert(0, "study", study)
        frames.append(t)
    df = pd.concat(frames, ignore_index=True)
    df["pooled_holm_p_boot"], df["pooled_holm_p_t"] = holm(df["p_boot"]), holm(df["p_t"])
    df["significant_in_study"] = df["verdict"].str.startswith("significant")
    df["significant_pooled"] = (df["pooled_holm_p_boot"] < ALPHA) & (df["pooled_holm_p_t"] < ALPHA)
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "families")
    a = ap.parse_args(argv)
    df = pooled()
    a.out.mkdir(parents=True, exist_ok=True)
    cols = ["study", "loss", "metric", "n_seeds", "delta", "ci_low", "ci_high", "holm_p_boot", "holm_p_t",
            "pooled_holm_p_boot", "pooled_holm_p_t", "significant_in_study", "significant_pooled"]
    df[cols].to_csv(a.out / "families.csv", index=False)
    sig = df[df["significant_in_study"]]
    lost = sig[~sig["significant_pooled"]]
    show = sig.assign(p=[f"{b:.3g} / {t:.3g}" for b, t in zip(sig["pooled_holm_p_boot"], sig["pooled_holm_p_t"])],
                      pooled=["significant" if s else "not significant" for s in sig["significant_pooled"]])
    md = [header("python experiments/one_family.py", "experiments/one_family.py", a.out), "",
          "## Every study's significant comparisons, held to one pooled family", "",
          f"{len(df)} in-family comparisons with >= {MIN_SEEDS} seeds across {len(STUDIES)} studies "
          f"({', '.join(STUDIES)}), Holm-adjusted together (bootstrap p and paired-t p each). Of the {len(sig)} "
          f"significant in their own study's family, {len(sig) - len(lost)} stay significant in the pooled one "
          f"and {len(lost)} do not.", "",
          show[["study", "loss", "metric", "n_seeds", "p", "pooled"]].rename(
              columns={"p": "pooled Holm p boot / t", "pooled": "in the pooled family"}).to_markdown(index=False)]
    (a.out / "families.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
