"""Writes notebooks/analysis.ipynb (kept as code so the notebook can be reviewed and regenerated)."""
import nbformat as nbf

nb = nbf.v4.new_notebook()
cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))
code = lambda s: cells.append(nbf.v4.new_code_cell(s))
md("""# numlearn: analysis of a Table 1 run

Loads run dirs and result files (never logs), shows the accuracy and numerical-distance tables, the
per-digit-position accuracy, the loss-weight sweep, and the digit distributions each loss produces on
held-out numbers (the paper's Figure 1 question: over-sharpened vs over-flattened).

Inputs (environment variables, defaults for `make reproduce-table1` + `make sweep-alpha`):
`NUMLEARN_NB_RUNS` (Table 1's result files: the committed store `results/runs/table1_tiny`, or run
dirs), `NUMLEARN_NB_SWEEP` (the model dir holding the sweep's <loss>/alpha=*/seed=* results on the
validation split, optional). The digit-distribution plot needs the trained models, which live in
the local run dirs (`outputs/`) only.""")
code("""import os, json, warnings
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook bar, imported by transformers
from pathlib import Path
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
%matplotlib inline
from IPython.display import display, Markdown

ROOT = Path(os.environ.get("NUMLEARN_ROOT", "..")).resolve()
RUNS = Path(os.environ.get("NUMLEARN_NB_RUNS", ROOT / "results/runs/table1_tiny/tiny"))  # the tiny model (tiny_chunk3 is another recipe)
SWEEP = Path(os.environ.get("NUMLEARN_NB_SWEEP", ROOT / "results/runs/table1_tiny/tiny"))
MAX_EXAMPLES = int(os.environ.get("NUMLEARN_NB_MAX_EXAMPLES", "200"))
print("runs:", RUNS.relative_to(ROOT) if RUNS.is_relative_to(ROOT) else RUNS)""")
md("## Tables from result files")
code("""from numlearn.reporting.collect import load_results
from numlearn.reporting.aggregate import accuracy_table, digit_table
df = load_results([RUNS])
mean, std, cols = accuracy_table(df)
display(Markdown("**Exact-match accuracy (%)**, mean over seeds"))
display(mean.round(1))
if df["numerical_distance"].notna().any():
    dmean, _, _ = accuracy_table(df[df["numerical_distance"].notna()], "numerical_distance", 1.0, with_macc=False)
    display(Markdown("**Numerical distance** (mean |slog(pred) - slog(truth)|, lower is better)"))
    display(dmean.round(3))""")
md("## Per-digit-position accuracy")
code("""dig = digit_table(df)
cols_to_plot = [c for c in dig.index.get_level_values("column").unique()]
# two panels a row, one legend for all of them below (a legend per panel covered the curves)
ncols = 2
nrows = -(-len(cols_to_plot) // ncols)
fig, axes = plt.subplots(nrows, ncols, figsize=(12, 3.8 * nrows), squeeze=False)
# one colour and line style per row, the same in every panel (tab20 x 3 styles)
rows = sorted({r for col in cols_to_plot for r in dig.xs(col, level="column").droplevel("model").index})
style = {r: (plt.get_cmap("tab20")(i % 20), ("-", "--", ":")[i // 20 % 3]) for i, r in enumerate(rows)}
for ax, col in zip(axes.flat, cols_to_plot):
    sub = dig.xs(col, level="column").droplevel("model")
    for r, vals in sub.iterrows():
        ax.plot(range(len(vals)), vals.to_numpy(), marker="o", ms=3, color=style[r][0], ls=style[r][1], label=r)
    ax.set_xticks(range(len(sub.columns)), sub.columns)
    ax.set_title(col); ax.set_ylabel("digit accuracy (%)"); ax.set_xlabel("position")
    ax.tick_params(axis="x", rotation=45); ax.grid(alpha=0.3)
for ax in list(axes.flat)[len(cols_to_plot):]:
    ax.set_visible(False)
handles = [plt.Line2D([], [], color=style[r][0], ls=style[r][1], marker="o", ms=3) for r in rows]
labels = rows
fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
fig.tight_layout(rect=(0, 0.06 + 0.02 * (len(labels) // 4), 1, 1)); plt.show()""")
md("## Loss-weight sweep (validation split; mean and 95% seed CI per weight)")
code("""from numlearn.reporting.sweep import plot, sweep_table
try:
    sdf = load_results(sorted(SWEEP.glob("*/alpha=*/seed=*/eval/synthetic_val")))
    st = sweep_table(sdf)  # one row per (loss, alpha, column): mean and 95% seed-bootstrap CI
    display(st.round(3))
    plot(st, Path("/tmp/numlearn_sweep.png"))
    from IPython.display import Image
    display(Image("/tmp/numlearn_sweep.png"))
except (FileNotFoundError, ValueError) as e:
    print("no sweep results yet (make sweep-alpha):", e)""")
md("""## Digit distributions on held-out numbers (the paper's Figure 1 question)

For each run's final model: teacher-forced on held-out synthetic solutions, the digit-conditional
distribution p (softmax over the ten digit logits) at every digit target. Left: mean probability as a
function of the distance |k - y| from the target digit (sharp: mass at 0; flat: spread out). Right: the
distribution of the entropy of p.""")
code("""from transformers import AutoModelForCausalLM, AutoTokenizer
from numlearn.data.sources import read_records
from numlearn.losses import digit_token_ids
from numlearn.records import ResultRecord, RunRecord
from numlearn.evaluation.teacher_forced import teacher_forced_digits

def digit_profile(run_dir, records):
    tok = AutoTokenizer.from_pretrained(run_dir / "final")
    model = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    m = teacher_forced_digits(model, tok, records, digit_token_ids(tok), 256)
    return np.array(m["mass_by_distance"]), np.array(m["entropies"])

runs = sorted({Path(ResultRecord.read(f).run["run_dir"]) for f in df["file"]})  # recorded, not guessed
CACHE = Path(os.environ.get("NUMLEARN_NB_CACHE", ROOT / "data_cache"))
test_file = sorted((CACHE / "synthetic").glob("*/seed=0/test-*.jsonl"), key=lambda p: (-p.stat().st_mtime, -int(p.stem.split("-")[1])))
records = [{"instruction": r["question"], "output": r["cot"]} for r in read_records(test_file[0])][:MAX_EXAMPLES] if test_file else []
if os.environ.get("NUMLEARN_NB_LOCAL_MODELS", "1") == "0":  # make notebook: the committed store only
    runs = []
no_model = [rd for rd in runs if not (rd / "final").is_dir()]
if no_model:  # results from the store whose models this machine does not hold
    print(f"{len(no_model)} of {len(runs)} runs have no local model (e.g. {no_model[0]}): left out of the plot; "
          "train them (make reproduce-table1) to include them")
    runs = [rd for rd in runs if rd not in no_model]
profiles = {}
for rd in runs:
    meta = RunRecord.of_run_dir(rd)
    profiles[f"{meta.row} (alpha={meta.alpha}, seed={meta.seed})"] = digit_profile(rd, records)
if profiles:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, (prof, ents) in profiles.items():
        a1.plot(range(10), prof, marker="o", label=name)
        a2.hist(ents, bins=30, histtype="step", label=name, density=True)
    a1.set_yscale("log"); a1.set_xlabel("|k - target digit|"); a1.set_ylabel("mean p[k]"); a1.legend(fontsize=7)
    a2.set_xlabel("entropy of p (nats)"); a2.set_ylabel("density")
    fig.tight_layout(); plt.show()
else:  # no model here: the committed figure of the same measurement (experiments/del_mechanism.py)
    from IPython.display import Image
    stored = ROOT / "results/del_mechanism/digit_distance.png"
    print(f"the committed measurement instead ({stored.relative_to(ROOT)}, 3 seeds per row):")
    display(Image(str(stored)))
if profiles:
    display(pd.DataFrame({k: {"p[target]": v[0][0], "mean entropy": v[1].mean()} for k, v in profiles.items()}).T.round(3))""")
nb["cells"] = cells
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
OUT = __import__("pathlib").Path(__file__).with_name("analysis.ipynb")


def execute(nb, root, env: dict | None = None) -> None:
    """Run every cell. By default from the committed store (``python -m numlearn.pipeline notebook``),
    this machine's run dirs playing no part: the notebook is committed with its outputs, so a reader on
    a code host sees the tables and plots. ``env``: the notebook's inputs instead (the tests')."""
    import os

    import nbclient

    env = {"NUMLEARN_ROOT": str(root), **({"NUMLEARN_NB_LOCAL_MODELS": "0"} if env is None else env)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3",
                                resources={"metadata": {"path": str(root / "notebooks")}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


if __name__ == "__main__":
    import sys

    if "--execute" in sys.argv:
        execute(nb, OUT.resolve().parents[1])
    nbf.write(nb, str(OUT))
