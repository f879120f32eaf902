"""The orchestrator: rows x seeds -> train -> evaluate -> publish into the store -> tables.

    python -m numlearn.pipeline table1 --seeds 8 --jobs 4 --reuse     # make reproduce-table1 SEEDS=8 REUSE=1
    python -m numlearn.pipeline tables --seeds 0-7 --out results/table1_tiny
    python -m numlearn.pipeline tables --seeds 8 --from-seed 3 --out results/table1_tiny/unswept_seeds
    python -m numlearn.pipeline sweep --seeds 3 --jobs 4 --reuse      # make sweep-alpha
    python -m numlearn.pipeline sweep-report --seeds 3
    python -m numlearn.pipeline ablation --seeds 8 --jobs 2 --reuse   # make ablation-tiny SEEDS=8 REUSE=1
    python -m numlearn.pipeline pretrained --seeds 8 --jobs 2 --reuse # make pretrained-tiny SEEDS=8 REUSE=1
    python -m numlearn.pipeline released --models qwen2.5-1.5b --with-base   # the authors' checkpoints, eval=paper
    python -m numlearn.pipeline study smollm2_gsm8k --seeds 5 --reuse  # any conf/study file of kind rows
    python -m numlearn.pipeline runs experiment=table1_tiny loss=mle,del seed=0,1      # run dirs from the configs
    python -m numlearn.pipeline pending --store results/runs experiment=table1_tiny loss=del seed=0-7

A **row** is a loss with optional weight and extra overrides, written ``loss[:alpha][+key=value...]``
(``del``, ``del:1.28``, ``del:1.28+loss.form=paper``); without an alpha the loss's configured weight
applies (``conf/loss``, ``conf/experiment``). **Seeds**: ``8`` = seeds 0..7, ``3-7`` a range,
``0,2,5`` a list. Each (row, seed) is one job (train, evaluate, publish its result files into the
store as soon as it ends); ``--jobs`` jobs run at once, each training on the preset's thread count, so the numbers do not
depend on ``--jobs``. A job's output goes to ``<outputs>/pipeline/<row>_seed=<s>.log``; the console shows one line per
running job. Every step resumes (training from its last checkpoint, generation from its JSONL), so
an interrupted command is re-run as it was. ``--reuse`` trains only the seeds the store lacks a usable
result for (missing, or trained under another recipe: the reason is printed).

The studies are data: ``conf/study/<name>.yaml`` (``numlearn.schema.StudyConfig``) holds each one's rows, grids,
outputs and declared family; Table 1's rows, the sweep's grid and the ablation's controls are read from there.
Planning (rows x seeds -> jobs, from the configs and the store) is ``numlearn.planning``; running the jobs is
``numlearn.jobs``. This module is the CLI above them; nothing imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from numlearn.jobs import Job, PipelineError, report_failures, run_jobs
from numlearn.planning import (
    AUTO_SELECTED,
    Request,
    Row,
    _fmt,
    configured_run_roots,
    configured_value,
    nonneg_int,
    parse_seeds,
    pending_seeds,
    plan,
    plan_rows,
    positive_int,
    rate_row,
    seeds_arg,
    selected_arg,
    selected_rows,
    sweep_rows,
    table1_runs,
)
from numlearn.planning import parse_grid as _parse_grid
from numlearn.rundirs import recipe_differences, training_recipe

STORE = Path("results/runs")
OUTPUTS = Path("outputs")
TEST_EXCLUDE = "synthetic_val"  # the split weights are chosen on never enters Table 1
MIN_SEEDS_FOR_ROBUSTNESS = 3  # robustness.md from 3 seeds (per-seed values); a verdict needs 5 (reporting.robustness)


def study(name: str):
    """The typed ``conf/study/<name>.yaml`` (``numlearn.schema.StudyConfig``): the studies are data."""
    from numlearn.cli import conf_dir
    from numlearn.schema import load_study_config

    path = Path(conf_dir()) / "study" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise PipelineError(f"unknown study {name!r}; choose one of {', '.join(known)} (conf/study)")
    return load_study_config(path)


def _grid(cfg) -> dict[str, tuple[float, ...]]:
    return {k: tuple(float(x) for x in v) for k, v in cfg.grid.items()}


# Named studies whose file did not load: name -> the one-line reason. ``--help`` still works; any other command
# ends with that line (issue 62: a typo in conf/study/sweep.yaml once made `pipeline --help` a traceback).
UNREADABLE: dict[str, str] = {}


def _named_study(name: str):
    """``study(name)``, or, when its file does not load, a stand-in with harmless values (the reason kept in
    ``UNREADABLE`` for ``main`` to report before any command runs)."""
    try:
        return study(name)
    except (PipelineError, ValueError, OSError) as e:
        from omegaconf import OmegaConf

        from numlearn.schema import StudyConfig

        UNREADABLE[name] = str(e).splitlines()[0]
        return OmegaConf.structured(StudyConfig(name=name, out=f"results/{name}", selected=f"results/{name}/s.json",
                                                evaluate=["eval=synthetic_val"], select_on="synthetic_val (cot)",
                                                model="tiny"))


# The named studies' definitions, read once from conf/study (their comments say why each row and grid point).
_TABLE1, _SWEEP, _ABLATION, _CHUNKED, _PRETRAINED, _MLE_LR = (
    _named_study(n) for n in ("table1", "sweep", "ablation", "chunked", "pretrained", "mle_lr"))
EXPERIMENT = str(_TABLE1.experiment)
TABLE1_LOSSES = tuple(_TABLE1.rows)
TABLE1_OUT = Path(_TABLE1.out)
SWEEP_GRID = _grid(_SWEEP)
SWEEP_OUT = Path(_SWEEP.out)
SELECTED = Path(_TABLE1.selected)
VAL_EVAL = str(_SWEEP.evaluate[0])
VAL_COLUMN = str(_SWEEP.select_on)
ABLATION_ROWS = tuple(_ABLATION.rows)
ABLATION_CONTROLS = tuple(_ABLATION.controls)
ABLATION_GRID = _grid(_ABLATION)
ABLATION_OUT = Path(_ABLATION.out)
ABLATION_MODEL = str(_ABLATION.model)
CHUNKED_MODEL = str(_CHUNKED.model)
CHUNKED_GRID = _grid(_CHUNKED)
CHUNKED_OUT = Path(_CHUNKED.out)
PRETRAINED_EXPERIMENT = str(_PRETRAINED.experiment)
PRETRAINED_ROWS = tuple(_PRETRAINED.rows)
PRETRAINED_PRIMARY = str(_PRETRAINED.primary_benchmark)
PRETRAINED_OUT = Path(_PRETRAINED.out)
MLE_LR_OUT = Path(_MLE_LR.out)
# The declared headline family of every study (issue 40), fixed before its tables are rebuilt: each row minus MLE
# on the study's primary CoT accuracy and on held-out digit accuracy, Holm-adjusted together (both the bootstrap
# and the paired-t p); distance and digit NLL are secondary, reported uncorrected as exploratory.
FAMILY_METRICS = tuple(_TABLE1.family_metrics)


def parse_grid(items: list[str], base: dict[str, tuple[float, ...]] | None = None) -> dict[str, tuple[float, ...]]:
    """``base`` (Table 1's sweep grid by default) with each ``loss=a,b,c`` item replacing a loss's grid."""
    return _parse_grid(items, SWEEP_GRID if base is None else base)


_report_failures = report_failures  # the name before the job runner moved to numlearn.jobs


# -- the commands ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    """What a study's robustness report tests: ``primary_benchmark``, whose CoT accuracy and distance are
    primary; ``family_metrics``: every row minus MLE on these is in the declared family, Holm-adjusted
    together, with the declared comparisons ``family`` (row:alpha:metric); ``selection_seeds``: the
    seeds the sweep chose weights on (the report tests on the others)."""

    primary_benchmark: str = "synthetic_test"
    selection_seeds: tuple[int, ...] = (0, 1, 2)
    family_metrics: tuple[str, ...] = FAMILY_METRICS
    family: tuple[str, ...] = ()
    baseline: str = "mle"  # the row every other is compared with (the tuned MLE's label: mle_lr0.006)
    may_differ: tuple[str, ...] = ()  # recipe keys the rows may differ in (train.learning_rate: the tuned MLE's)
    primary_modes: tuple[str, ...] = ("cot",)  # the generation modes whose accuracy is primary (cot, pot)
    exclude: tuple[str, ...] = (TEST_EXCLUDE,)  # benchmarks the selection used: never in the tables


def build_tables(rows: list[Row], seeds: list[int], out: Path, *, experiment: str, store: Path,
                 selected: Path | None, command: str, report: Family = Family()) -> int:
    """Table 1's tables from the store only: aggregate, and with 3+ seeds the robustness report of
    ``report``'s family."""
    import shutil
    import tempfile

    from numlearn.reporting import aggregate, robustness

    runs = table1_runs(rows, seeds, experiment=experiment, store=store)
    # built in a directory of their own, then moved into ``out`` only when every table was built: a command
    # that fails writes nothing (a failing robustness report once left 8 committed files rewritten)
    stage = Path(tempfile.mkdtemp(prefix="numlearn-tables-"))
    try:
        args = ["--exclude-benchmarks", ",".join(report.exclude), "--out", str(stage), "--command", command,
                "--baseline", report.baseline,
                *(["--recipe-may-differ-in", ",".join(report.may_differ)] if report.may_differ else []),
                *(["--selected", str(selected)] if selected is not None and selected.is_file() else [])]
        with contextlib.redirect_stdout(io.StringIO()):  # every table goes to files; the console gets one
            rc = aggregate.main([*runs, *args])
        if rc == 0 and len(seeds) >= MIN_SEEDS_FOR_ROBUSTNESS:
            with contextlib.redirect_stdout(io.StringIO()):
                rc = robustness.main([*runs, *args, "--primary-benchmark", report.primary_benchmark,
                                      "--primary-modes", ",".join(report.primary_modes),
                                      "--family-metrics", ",".join(report.family_metrics),
                                      *(x for f in report.family for x in ("--family", f)),
                                      "--selection-seeds", ",".join(map(str, report.selection_seeds))])
        if rc != 0:
            _say(f"numlearn.pipeline: nothing written to {out} (the tables failed above)")
            return rc
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(stage.rglob("*")):
            if f.is_file():
                (out / f.relative_to(stage)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, out / f.relative_to(stage))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    print(table_section(out / "table1.md", "Accuracy (%)"))
    print(f"(every table -- distance, digit metrics, minus MLE{', robustness' if rc == 0 and len(seeds) >= 3 else ''}"
          f" -- is in {out}/)")
    return rc


def agreement(rows: list[Row], seeds: list[int], *, experiment: str, store: Path, committed: Path,
              selected: Path | None, column: str, say) -> None:
    """Issue 61 item 5: whether this run's seeds agree with the committed store, on any machine -- each cell
    against the store's prediction interval for a new seed, each headline comparison's sign
    (``reporting.reproduction``); the last line names the command that re-estimates the intervals here."""
    from numlearn.reporting import aggregate, reproduction

    (mle_root,) = configured_run_roots([f"experiment={experiment}", "loss=mle", f"paths.output_dir={committed}"])
    stored = sorted(int(p.name.split("=", 1)[1]) for p in mle_root.glob("seed=*") if p.is_dir())
    theirs = [r for r in table1_runs(rows, stored, experiment=experiment, store=committed) if Path(r).is_dir()]
    if len(stored) < 2 or not theirs:
        say(f"[reproduce] the store {committed} holds {len(stored)} seed(s) of MLE: no prediction interval to compare "
            "with")
        return
    kw = {"exclude_benchmarks": [TEST_EXCLUDE], "selected": selected if selected and Path(selected).is_file() else None}
    new, _ = aggregate.load_table_results(table1_runs(rows, seeds, experiment=experiment, store=store), **kw)
    ref, _ = aggregate.load_table_results(theirs, **kw)
    from numlearn.records import ResultRecord
    from numlearn.reporting.collect import shared_recipe

    mine, stored_recipe = (shared_recipe(ResultRecord.read(df["file"].iloc[0])) for df in (new, ref))
    if note := reproduction.recipe_note(recipe_differences(stored_recipe, mine)):
        say("[reproduce] " + note)
    for line in reproduction.report(new, ref, column):
        say("[reproduce] " + line)
    say(f"[reproduce] to re-estimate the intervals on this machine, more seeds: make reproduce-table1 SEEDS={len(stored)}")


def table_section(md: Path, heading: str) -> str:
    """The section ``## heading`` of a markdown file, heading included (the whole file if it has none)."""
    text = md.read_text(encoding="utf-8") if md.is_file() else ""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    return f"## {heading}\n{m.group(1).rstrip()}" if m else text.rstrip()


def compare_with_store(rows: list[Row], seeds: list[int], *, experiment: str, store: Path, committed: Path,
                       say) -> bool:
    """The result files this run put in ``store`` against the committed store, per seed; the last line
    says whether the run reproduced it. True when every file is identical."""
    from numlearn.reporting.store import compare, result_files

    same = True
    for seed in seeds:
        files = [f for run in table1_runs(rows, [seed], experiment=experiment, store=store)
                 for f in result_files(Path(run)) if "/eval/" + TEST_EXCLUDE + "/" not in str(f)]
        c = compare(files, store, committed)
        for line in c.lines(f"seed {seed}", committed):
            say(line)
        same = same and not c.differ and not c.absent and c.n > 0
    return same


def sweep_report(seeds: int, grid: dict[str, tuple[float, ...]], *, experiment: str, store: Path, out: Path,
                 command: str, only_grid: bool = False, model: str = "*") -> int:
    """The sweep's table, plot and chosen weights from the store; ``only_grid``: the grid's points (and
    MLE) only, not every loss and weight the store holds validation results of; ``model``: that model's
    runs only (the store's model level; every model by default)."""
    from numlearn.reporting import sweep

    root = store / experiment
    if only_grid:  # the grid's points (and MLE) only: other studies' validation runs share the store
        points = [("mle", "*"), *((loss, _fmt(a)) for loss, alphas in grid.items() for a in alphas)]
    else:
        points = [("*", "*")]
    dirs = sorted(str(p) for loss, alpha in points
                  for p in root.glob(f"{model}/{loss}/alpha={alpha}/seed=*/eval/{TEST_EXCLUDE}"))
    if not dirs:
        raise PipelineError(f"the store {store} holds no {TEST_EXCLUDE} result under {root}: run the sweep first")
    expect = ["--expect", "mle=0"] + [x for loss, alphas in grid.items()
                                      for x in ("--expect", f"{loss}={','.join(_fmt(a) for a in alphas)}")]
    return sweep.main([*dirs, "--select-on", VAL_COLUMN, "--out", str(out), "--min-seeds", str(seeds), *expect,
                       "--command", command])


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _docs_hint() -> None:
    """After the committed tables change: whether the README/docs blocks still match them."""
    from numlearn.reporting.docs import check_text

    stale = [d for d in (Path("README.md"), Path("docs/results.md")) if d.is_file()
             and check_text(d.read_text(encoding="utf-8"), Path("."), str(d), str(d.parent))]
    if stale:
        _say(f"docs: {', '.join(map(str, stale))} no longer match the committed tables: `make docs` copies the "
             "tables in; then reread the prose the check names")


def _common(p, seeds_default):
    p.add_argument("--seeds", default=seeds_default, help="a count (8 = 0..7), a range (3-7) or a list (0,2,5)")
    p.add_argument("--experiment", default=EXPERIMENT)
    p.add_argument("--store", type=Path, default=Path(os.environ.get("NUMLEARN_STORE", STORE)))
    p.add_argument("--command", default=None, help="the command recorded in the tables' header")

def _study_metrics(p):
    p.add_argument("--primary-benchmark", default="synthetic_test",
                   help="the benchmark whose CoT accuracy and distance are primary (robustness.md)")
    p.add_argument("--family-metrics", default=",".join(FAMILY_METRICS), metavar="M,M",
                   help="the declared family: every row minus MLE on these metrics, Holm-adjusted together "
                        "(accuracy, distance, digit_acc, digit_nll)")

def _running(p):
    p.add_argument("--executor", choices=("local", "submitit_local", "slurm"), default="local",
                   help="where the jobs run: this machine's pool (default), submitit's local executor, or SLURM "
                        "(a job per stage, evaluations afterok their training; numlearn.executors)")
    p.add_argument("--plan", action="store_true", help="print the job graph, resources and GPU-hours; submit nothing")
    p.add_argument("--gpu-check", type=Path, default=Path("results/gpu_check/summary.json"),
                   help="the GPU check's summary (experiments/gpu_check.sh) whose measured training rate --plan's "
                        "GPU-hours use; without one, 35%% MFU of an H100 is assumed (and said)")
    p.add_argument("--partition", default=None, help="SLURM partition of every job")
    p.add_argument("--cluster", default="default", metavar="NAME|FILE",
                   help="what the SLURM site asks of every job: conf/cluster/<NAME>.yaml or a file (account, qos, "
                        "constraint, exclude, setup lines, a CPU partition for 0-GPU jobs, the time-limit margin)")
    p.add_argument("--gpus-per-node", type=positive_int, default=None, help="training GPUs (default: the preset's world size)")
    p.add_argument("--tasks-per-node", type=positive_int, default=None,
                   help="training processes, one rank each (default: one per GPU; 1 on CPU)")
    p.add_argument("--cpus-per-task", type=positive_int, default=None)
    p.add_argument("--mem-gb", type=positive_int, default=None)
    p.add_argument("--timeout-min", type=positive_int, default=None, help="training jobs' time limit")
    p.add_argument("--jobs", type=positive_int, default=4, help="rows at once (each trains on the preset's threads)")
    p.add_argument("--reuse", action="store_true", help="run only the seeds the store lacks a usable result for")
    p.add_argument("--outputs", type=Path, default=Path(os.environ.get("NUMLEARN_OUTPUT_DIR", OUTPUTS)))
    p.add_argument("--live", choices=("auto", "on", "off"), default="auto", help="redraw the job lines in place")



def _table1_parsers(sub) -> None:
    """table1, study and tables: rows x seeds and their tables."""
    p = sub.add_parser("table1", help="train, evaluate and publish every row, then build the tables")
    _common(p, "1")
    _running(p)
    p.add_argument("--rows", default=None, help="comma-separated rows, loss[:alpha][+key=value...] (default: "
                   f"{','.join(TABLE1_LOSSES)}); the sweep's chosen weights are added")
    p.add_argument("--selected", type=selected_arg, default=AUTO_SELECTED,
                   help="the sweep's chosen weights (rows labelled val-chosen); none: no chosen weights; auto (default): "
                        f"{SELECTED} for {EXPERIMENT}, none for a paper preset")
    p.add_argument("--out", type=Path, default=None,
                   help=f"where the tables go (default: {TABLE1_OUT} for {EXPERIMENT}, results/<experiment> otherwise)")
    p.add_argument("--compare-with", type=Path, default=None, metavar="STORE",
                   help="compare this run's result files with that store (the committed results/runs) and end "
                        "with one line per seed saying whether they are identical; nothing is written there")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with (a shrunken rehearsal: make smoke)")
    _study_metrics(p)
    p = sub.add_parser("study", help="a study of conf/study/<name>.yaml whose kind is rows (smollm2_gsm8k, ...): "
                                     "train, evaluate, publish its rows x seeds, then its tables")
    p.add_argument("name", help="the study's file name in conf/study")
    _common(p, None)
    _running(p)
    p.add_argument("--out", type=Path, default=None, help="where the tables go (default: the study's out)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with")
    p.add_argument("--tables-only", action="store_true", help="the tables from the store only (no training)")
    p = sub.add_parser("tables", help="Table 1's tables from the store only (no training)")
    _common(p, "1")
    _study_metrics(p)
    p.add_argument("--from-seed", type=nonneg_int, default=None,
                   help="only the seeds from this one on (the seeds a sweep of that many seeds never saw)")
    p.add_argument("--rows", default=None)
    p.add_argument("--selected", type=selected_arg, default=AUTO_SELECTED)
    p.add_argument("--out", type=Path, default=None,
                   help=f"where the tables go (default: {TABLE1_OUT} for {EXPERIMENT}, results/<experiment> otherwise)")


def _grid_parsers(sub) -> None:
    """sweep, sweep-report, ablation, pretrained, chunked: the studies with a weight grid or a base."""
    p = sub.add_parser("sweep", help="every loss over its weight grid on the validation split, then the report")
    _common(p, "3")
    _running(p)
    p.add_argument("--grid", action="append", default=[], metavar="LOSS=A,B,...", help="replace a loss's grid")
    p.add_argument("--out", type=Path, default=SWEEP_OUT)
    p = sub.add_parser("sweep-report", help="the sweep's table, plot and chosen weights from the store (no training)")
    _common(p, "3")
    p.add_argument("--grid", action="append", default=[], metavar="LOSS=A,B,...")
    p.add_argument("--out", type=Path, default=SWEEP_OUT)
    p = sub.add_parser("ablation", help="DEL's parts: the ablation rows, each form's validation sweep, the table")
    _common(p, "8")
    _running(p)
    p.add_argument("--sweep-seeds", default="3", help="seeds of the validation sweep (a count, range or list)")
    p.add_argument("--out", type=Path, default=ABLATION_OUT)
    p = sub.add_parser("pretrained", help="a pretrained start: each row fine-tunes its seed's MLE base on a "
                                          "shifted task (the bases trained first where missing), then the tables")
    _common(p, "8")
    _running(p)
    p.set_defaults(experiment=PRETRAINED_EXPERIMENT)
    p.add_argument("--rows", default=None, help="comma-separated rows (default: "
                   f"{','.join(PRETRAINED_ROWS)} and the Table 1 sweep's chosen weights)")
    p.add_argument("--selected", type=selected_arg, default=SELECTED,
                   help="the sweep's chosen weights (rows labelled val-chosen); none: no chosen weights")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with (a shrunken rehearsal)")
    p.add_argument("--base-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override the missing bases train with (and a complete base is checked against)")
    p.add_argument("--out", type=Path, default=PRETRAINED_OUT)
    p = sub.add_parser("mle-lr", help="MLE tuned as the numeric losses are: its learning rate chosen on validation, "
                                      "then every Table 1 row minus the tuned MLE on fresh seeds (conf/study/mle_lr)")
    _common(p, "3-7")
    _running(p)
    p.add_argument("--sweep-seeds", default="3", help="seeds of the validation sweep (a count, range or list)")
    p.add_argument("--out", type=Path, default=MLE_LR_OUT)
    p = sub.add_parser("chunked", help="tokenizers that group digits: MLE single vs chunked, the numeric losses on "
                                       "number tokens at their validation-chosen weights")
    _common(p, "8")
    _running(p)
    p.add_argument("--sweep-seeds", default="3", help="seeds of the validation sweep (a count, range or list)")
    p.add_argument("--grid", action="append", default=[], metavar="LOSS=A,B,...", help="replace a loss's grid")
    p.add_argument("--only", default=None, metavar="LOSS,...", help="sweep and tabulate only these losses")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override every row trains and evaluates with (a shrunken rehearsal)")
    p.add_argument("--out", type=Path, default=CHUNKED_OUT)


def _tool_parsers(sub) -> None:
    """released, smoke, notebook, runs, pending."""
    p = sub.add_parser("released", help="the DEL authors' released checkpoints evaluated as the paper did (eval=paper), "
                                        "beside their reported mACC (conf/study/released.yaml)")
    p.add_argument("--models", default=None, help="comma-separated names from conf/study/released.yaml (default: all)")
    p.add_argument("--with-base", action="store_true", help="evaluate each checkpoint's base model too")
    p.add_argument("--hub-map", action="append", default=[], metavar="HUB_ID=DIR",
                   help="a hub id's local copy (downloaded weights, or a stand-in)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="an evaluate override for every job (eval.tensor_parallel_size=1 on one GPU)")
    p.add_argument("--jobs", type=positive_int, default=1, help="evaluations at once (each wants the GPUs it names)")
    p.add_argument("--executor", choices=("local", "submitit_local", "slurm"), default="local",
                   help="where the evaluations run (slurm: a job each, its publish afterok)")
    p.add_argument("--plan", action="store_true", help="print the job graph and resources; submit nothing")
    p.add_argument("--partition", default=None)
    p.add_argument("--cluster", default="default", metavar="NAME|FILE", help="conf/cluster/<NAME>.yaml or a file")
    p.add_argument("--tables-only", action="store_true", help="the table from the store only (no evaluation)")
    p.add_argument("--store", type=Path, default=Path(os.environ.get("NUMLEARN_STORE", STORE)))
    p.add_argument("--outputs", type=Path, default=Path(os.environ.get("NUMLEARN_OUTPUT_DIR", OUTPUTS)))
    p.add_argument("--out", type=Path, default=Path("results/released"))
    p.add_argument("--reuse", action="store_true", help="evaluate only what the store lacks")
    p.add_argument("--live", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--command", default=None)
    p = sub.add_parser("smoke", help="the whole pipeline shrunken (MLE and DEL, 1 seed, 40 steps, 10 problems) in "
                                     "a temporary directory (make smoke, ~2 min); prints what to expect")
    p.add_argument("--jobs", type=positive_int, default=2)
    p.add_argument("--dir", type=Path, default=None, help="where (default: a new temporary directory)")
    p = sub.add_parser("notebook", help="execute notebooks/analysis.ipynb from the committed store, outputs kept")
    p = sub.add_parser("runs", help="the run directories the configs name (Hydra overrides)")
    p.add_argument("overrides", nargs="*")
    p = sub.add_parser("pending", help="the seeds without a usable stored result (Hydra overrides)")
    p.add_argument("--store", default=str(STORE))
    p.add_argument("overrides", nargs="*")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m numlearn.pipeline``: one sub-command per study or tool."""
    ap = argparse.ArgumentParser(prog="python -m numlearn.pipeline", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    _table1_parsers(sub)
    _grid_parsers(sub)
    _tool_parsers(sub)
    return ap


# kind -> (its named study's file, the command that runs it): ``study <name>`` of these kinds is that command
NAMED_STUDIES = {"sweep": ("sweep", "sweep"), "lr_sweep": ("mle_lr", "mle-lr"), "ablation": ("ablation", "ablation"),
                 "chunked": ("chunked", "chunked"), "pretrained": ("pretrained", "pretrained"),
                 "released": ("released", "released")}


def _as_named_command(argv: list[str]) -> list[str]:
    """``study <name> ...`` of a named study with a command of its own (``study sweep``, ``study mle_lr``, ...) is
    that command with the same flags (issue 62: ``study`` dispatches on the file's kind); every other argv as is."""
    if len(argv) < 2 or argv[0] != "study" or argv[1].startswith("-"):
        return argv
    try:
        kind = study(argv[1]).kind
    except (PipelineError, ValueError, OSError):
        return argv  # the study command reports it in one line
    named, command = NAMED_STUDIES.get(kind, (None, None))
    if named == argv[1]:
        return [command, *argv[2:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    argv = _as_named_command(list(sys.argv[1:] if argv is None else argv))
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    a.invocation = "python -m numlearn.pipeline " + shlex.join(argv)
    if UNREADABLE:  # after parsing: --help has printed and exited already
        name, why = next(iter(UNREADABLE.items()))
        _say(f"numlearn.pipeline: error: conf/study/{name}.yaml does not load ({why}); every command reads the "
             "named studies: fix that file" + (f" (and {', '.join(list(UNREADABLE)[1:])})" if len(UNREADABLE) > 1
                                                else ""))
        return 2
    _stop_on_sigterm()
    from numlearn.cli import override_range_problem

    for o in (*getattr(a, "override", ()), *getattr(a, "base_override", ())):
        if (problem := override_range_problem(o)) is not None:  # before any job: each would refuse it anyway
            from numlearn.schema import range_refusal

            _say(f"numlearn.pipeline: error: --override {range_refusal([problem])}")
            return 2
    try:
        return _dispatch(a)
    except (PipelineError, ValueError, OSError) as e:  # the store's StoreError is a ValueError
        _say(f"numlearn.pipeline: error: {e}")
        return 2
    except KeyboardInterrupt:
        _say("numlearn.pipeline: interrupted; every step resumes: run the same command again")
        return 130


def _table1(a, seeds: list[int], live) -> int:
    """``table1`` (train, evaluate, publish every row, then the tables) and ``tables`` (the tables from the store
    only): the rows given or Table 1's, the chosen weights added, every override recorded in the header."""
    a.selected = _chosen_weights(a)
    if a.out is None:  # a paper preset's table never lands on the tiny one's committed table
        a.out = TABLE1_OUT if a.experiment == EXPERIMENT else Path("results") / a.experiment
    rows = [Row.parse(r) for r in (a.rows or ",".join(TABLE1_LOSSES)).split(",") if r]
    rows += [r for r in selected_rows(a.selected) if r not in rows]
    if extra := tuple(getattr(a, "override", None) or ()):
        rows = [Row(r.loss, r.alpha, (*r.extra, *extra)) for r in rows]
    if a.cmd == "table1" and a.compare_with is not None and a.compare_with.resolve() == a.store.resolve():
        raise PipelineError(f"--compare-with {a.compare_with} is the store this run publishes into (--store): "
                            "give the user's own store, e.g. --store outputs/store")
    if a.cmd == "table1":
        jobs = plan_rows(rows, seeds, experiment=a.experiment, evaluate_overrides=[], store=a.store,
                         outputs=a.outputs, reuse=a.reuse, say=_say)
        if a.executor != "local" or a.plan:
            return submitted(a, jobs, rows, seeds)
        failed = run_jobs(jobs, a.jobs, live=live) if jobs else []
        if failed:
            report_failures(failed, _say)
            return 1
        default = (a.rows is None and a.out == TABLE1_OUT and a.experiment == EXPERIMENT
                   and a.store == STORE)
        command = a.command or (f"make reproduce-table1 SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else "")
                                if default else a.invocation)
    else:
        command = a.command or a.invocation
    command = _with_what_changed(command, a)
    report = Family(primary_benchmark=a.primary_benchmark, family=tuple(getattr(a, "family", None) or ()),
                    family_metrics=tuple(m for m in a.family_metrics.split(",") if m))
    rc = build_tables(rows, seeds, a.out, experiment=a.experiment, store=a.store, selected=a.selected,
                      command=command, report=report)
    if rc == 0 and a.out.resolve() == TABLE1_OUT.resolve():
        _docs_hint()
    if rc == 0 and a.cmd == "table1" and a.compare_with is not None:
        say = lambda m: print(m, flush=True)  # noqa: E731
        compare_with_store(rows, seeds, experiment=a.experiment, store=a.store, committed=a.compare_with, say=say)
        agreement(rows, seeds, experiment=a.experiment, store=a.store, committed=a.compare_with,
                  selected=a.selected, column=f"{a.primary_benchmark} (cot)", say=say)
    return rc


def _with_what_changed(command: str, a) -> str:
    """Issue 66 item 2: a table's header records every option that changed what was trained or tabled, even
    when ``--command`` names a make alias (``make reproduce-table1 SEEDS=1`` run with ``ARGS="--override
    train.max_steps=30"`` once recorded only the alias): each override, and the rows, experiment and chosen
    weights the command line gave (not a study file's), that the command string does not already hold."""
    argv = shlex.split(getattr(a, "invocation", ""))
    given = [f"--override {o}" for o in getattr(a, "override", None) or ()]
    given += [f"{flag} {argv[i + 1]}" for i, flag in enumerate(argv[:-1]) if flag in ("--rows", "--experiment",
                                                                                       "--selected")]
    missing = [g for g in given if g.split(" ", 1)[1] not in command]
    return command + (f" (with {' '.join(missing)})" if missing else "")


def _chosen_weights(a) -> Path | None:
    """``--selected auto``: the tiny sweep's chosen weights for the tiny recipe only -- they were chosen on the
    tiny model, so a paper preset gets the paper's rows (and is told so); a file given for a paper preset is
    used, and said."""
    if a.selected == AUTO_SELECTED:
        if a.experiment == EXPERIMENT:
            return SELECTED
        _say(f"[{a.cmd}] {a.experiment}: its rows only; the chosen weights of {SELECTED} are the tiny model's "
             f"({EXPERIMENT}), not added (give --selected FILE to add a sweep's)")
        return None
    if a.selected is not None and a.experiment != EXPERIMENT and Path(a.selected).is_file():
        _say(f"[{a.cmd}] {a.experiment}: adding the chosen weights of {a.selected} as rows (val-chosen)")
    return a.selected


def _refuse_cluster_flags(a) -> None:
    """A study without a cluster path (sweep, ablation, pretrained, chunked) refuses ``--executor`` and ``--plan``
    in one line before anything starts (``ablation --plan`` used to start training here and orphan it)."""
    if a.cmd not in ("table1", "released") and (getattr(a, "executor", "local") != "local" or getattr(a, "plan", False)):
        flags = " ".join(f for f, on in (("--executor " + str(getattr(a, "executor", "")),
                                          getattr(a, "executor", "local") != "local"),
                                         ("--plan", getattr(a, "plan", False))) if on)
        raise PipelineError(f"{a.cmd} runs on this machine's worker pool only, with no plan and no cluster executor "
                            f"({flags} given: nothing was started); drop {flags}, or run its rows on a cluster as "
                            "table1 --rows ... --executor slurm, which plans (--plan) and submits")


def _stop_on_sigterm() -> None:
    """A SIGTERM (a scheduler's stop, ``kill``) ends the orchestrator as Ctrl-C does: the running steps' process
    groups are stopped (``numlearn.jobs.run_jobs``), nothing is left orphaned, and the same command resumes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def notebook() -> int:
    """notebooks/analysis.ipynb regenerated from its script and executed on the committed store, so
    it is committed with its tables and plots (a reader on a code host sees them)."""
    from numlearn.cli import REPO_ROOT

    script = REPO_ROOT / "notebooks" / "make_analysis_notebook.py"
    if not script.is_file():
        raise PipelineError(f"{script} not found: run from a clone of numlearn")
    _say(f"[notebook] executing {script.with_name('analysis.ipynb')} on {STORE}")
    return subprocess.run([sys.executable, str(script), "--execute"], cwd=REPO_ROOT).returncode


SMOKE_OVERRIDES = ("train.max_steps=40", "eval.limit=10", "eval.teacher_forced.n=20")


def smoke(a) -> int:
    """``make smoke``: train -> evaluate -> store -> table on two rows shrunk to 40 steps and 10
    problems a benchmark, in a directory of its own (nothing under the checkout is written)."""
    import tempfile

    d = a.dir or Path(tempfile.mkdtemp(prefix="numlearn-smoke-"))
    _say(f"[smoke] MLE and DEL (1.28), seed 0, {', '.join(SMOKE_OVERRIDES)}; everything under {d}")
    argv = ["table1", "--rows", "mle,del", "--selected", "none", "--seeds", "1", "--jobs", str(a.jobs),
            "--outputs", str(d / "outputs"), "--store", str(d / "store"), "--out", str(d / "tables"),
            "--live", "off", "--command", "make smoke", *(x for o in SMOKE_OVERRIDES for x in ("--override", o))]
    rc = main(argv)
    if rc == 0:
        print(f"[smoke] what you should see: the Accuracy table above with rows mle and del, 1 seed, "
              f"each cell 0-30 % (40 steps teach the tiny model little; the real run trains 1,000). The pipeline "
              f"ran end to end. Files: {d}")
    return rc


def released(a) -> int:
    """The released checkpoints: one evaluation job per (checkpoint, role), each published, then the table."""
    from numlearn import released as rel
    from numlearn.cli import conf_dir, preset_config

    study = rel.choose(rel.load_study(Path(conf_dir()) / "study" / "released.yaml"), a.models)
    hub_map = {}
    for m in a.hub_map:
        hub, eq, d = m.partition("=")
        if not eq or not Path(d).is_dir():
            raise PipelineError(f"--hub-map {m!r}: give HUB_ID=DIR with DIR an existing model directory")
        hub_map[hub] = str(Path(d).resolve())
    roles = rel.ROLES if a.with_base else ("released",)
    jobs = []
    for ck in study:
        for role in roles:
            if a.reuse and rel.stored_results(a.store, ck, role):
                _say(f"[released] {ck.name}/{role}: stored results found (--reuse): not evaluated again")
                continue
            log = a.outputs / "pipeline" / f"released_{ck.name}_{role}.log"
            jobs.append(Job(f"{ck.name} {role}", rel.evaluate_steps(ck, role, outputs=a.outputs, store=a.store,
                                                                    hub_map=hub_map, overrides=a.override), log))
    if a.tables_only:
        jobs = []
    if jobs and a.executor == "local" and not a.plan:
        _refuse_unreachable([ck.model(role) for ck in study for role in roles], hub_map)
    os.environ.setdefault("HF_HUB_OFFLINE", "")  # the hub ids are the real path: let evaluate reach the hub
    if jobs and (a.executor != "local" or a.plan):
        return _released_submitted(a, jobs, study)
    failed = run_jobs(jobs, a.jobs, live={"auto": None, "on": True, "off": False}[a.live]) if jobs else []
    benchmarks = tuple(preset_config(study[0].experiment, list(a.override)).eval.benchmarks) if study else ()
    text = rel.table(study, a.store, a.out, a.command or a.invocation, benchmarks)
    print(text)
    if failed:
        _say(f"[released] {len(failed)} evaluation(s) failed: " + ", ".join(f"{j.name} (log: {j.log})" for j in failed))
        return 1
    return 0


def _refuse_unreachable(models: list[str], hub_map: dict[str, str]) -> None:
    """Issue 60 item 9: a model that is no local directory (``--hub-map``), not in the Hugging Face cache, while
    the hub does not answer, is refused in one line naming each and the command that fixes it -- before any
    evaluation starts (each used to fail in its log, and the table came out empty)."""
    from numlearn.cli import offline_if_hub_unreachable
    from numlearn.evaluation.recipe import _in_hub_cache

    absent = [m for m in dict.fromkeys(models) if m not in hub_map and not Path(m).is_dir() and not _in_hub_cache(m)]
    if not absent:
        return
    before = os.environ.get("HF_HUB_OFFLINE")
    with contextlib.redirect_stderr(io.StringIO()):  # its "running offline" line: not what happens here
        offline = before == "1" or offline_if_hub_unreachable("released")
    if before is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = before
    if offline:
        raise PipelineError(
            f"{', '.join(absent)}: neither a local directory (--hub-map) nor in the Hugging Face cache, and the hub "
            "does not answer here; where it does, `huggingface-cli download ID --local-dir DIR` for each, then "
            "--hub-map ID=DIR (or run this where the hub answers)")


def _released_submitted(a, jobs, study) -> int:
    """``released --executor submitit_local|slurm`` (or ``--plan``): an evaluation job per checkpoint and role with
    its model's ``eval=paper`` GPUs, each publish after it, the table after every publish."""
    from numlearn import executors as ex
    from numlearn.cli import preset_config

    def eval_resources(experiment: str) -> ex.Resources:  # each checkpoint's own preset: its eval=paper GPUs
        cfg = preset_config(experiment, list(a.override), config="evaluate")
        tp = int(cfg.eval.tensor_parallel_size) if str(cfg.eval.backend) == "vllm" else 0
        return ex.Resources(gpus_per_node=tp, cpus_per_task=8 if tp else 1, mem_gb=64 * tp or None,
                            timeout_min=720 if tp else 120, partition=a.partition)

    per_model = {ck.name: eval_resources(ck.experiment) for ck in study}
    ev = per_model[study[0].name]
    pub = ex.Resources(timeout_min=30, partition=a.partition)
    tables = [sys.executable, "-m", "numlearn.pipeline", "released", "--tables-only", "--store", str(a.store),
              "--out", str(a.out), "--models", ",".join(ck.name for ck in study),
              *(x for o in a.override for x in ("--override", o)), "--command", a.command or a.invocation]
    stages = ex.stage_graph(jobs, ev, ev, pub, tables_argv=tables)
    stages[-1].log = a.outputs / "pipeline" / "released_tables.log"
    from numlearn.cli import cluster_config

    cluster = cluster_config(a.cluster)
    for st in stages:
        if " evaluate" in st.key:
            st.resources = per_model[st.key.split(" ", 1)[0]]
        st.resources = st.resources.on_cluster(cluster)
    if a.plan:
        size = {ck.name: ck.params_b for ck in study}
        per_stage = {st.key: ex.evaluation_hours(size[st.key.split(" ", 1)[0]], st.resources.gpus)
                     for st in stages if " evaluate" in st.key}
        est = ex.Estimate((0.0, 0.0), 0.0, "estimate, not measured: ~1 GPU-hour per 7B parameters per evaluation of "
                          "the seven benchmarks with vLLM", per_stage=per_stage)
        print(ex.plan_text(stages, a.executor, est, where={"jobs": a.outputs / "pipeline" / "submitit"}))
        return 0
    executor = ex.SubmititExecutor("local" if a.executor == "submitit_local" else "slurm",
                                   a.outputs / "pipeline" / "submitit")
    with ex.State(a.outputs / "pipeline" / f"released.{a.executor}.state.json") as state:  # one orchestrator
        out = ex.submit_graph(stages, executor, state, say=_say, max_running=a.jobs)
    if out.failed or out.blocked:
        _say(f"[released] failed: {', '.join(out.failed)}; run the same command again to resubmit them")
        return 1
    return 0


def _dispatch(a) -> int:
    if a.cmd == "smoke":
        return smoke(a)
    if a.cmd == "released":
        return released(a)
    if a.cmd == "notebook":
        return notebook()
    if a.cmd == "runs":
        for p in configured_run_roots(a.overrides):
            print(p)
        return 0
    if a.cmd == "pending":
        seeds = pending_seeds(a.overrides, a.store, report=lambda seed, why: _say(f"[store] seed={seed}: {why}"))
        print(seeds_arg(seeds))
        return 0
    if a.cmd == "study" and a.seeds is None:  # the study's declared seeds, else one
        a.seeds = str(study(a.name).seeds or "1")
    seeds = parse_seeds(a.seeds)
    if getattr(a, "from_seed", None) is not None:
        seeds = [s for s in seeds if s >= a.from_seed]
        if not seeds:
            raise PipelineError(f"--seeds {a.seeds} leaves no seed from {a.from_seed} on (the sweep's seeds are "
                                f"0..{a.from_seed - 1}): give more seeds, e.g. --seeds 8")
    live = {"auto": None, "on": True, "off": False}.get(getattr(a, "live", "auto"))
    if a.cmd == "study" and study(a.name).kind == "tuned":
        return _tuned(a, live)
    if a.cmd == "study":
        _study_as_table1(a)
    _refuse_cluster_flags(a)
    if a.cmd in ("table1", "tables"):
        return _table1(a, seeds, live)
    if a.cmd == "ablation":
        return ablation(a, seeds, live)
    if a.cmd == "chunked":
        return chunked(a, seeds, live)
    if a.cmd == "pretrained":
        return pretrained(a, seeds, live)
    if a.cmd == "mle-lr":
        return mle_lr(a, seeds, live)
    grid = parse_grid(a.grid)
    command = a.command or ("make sweep-alpha SWEEP_SEEDS=" + str(a.seeds) + "".join(
        f" SWEEP_{k.upper()}={','.join(_fmt(x) for x in v)}" for k, v in grid.items()))
    if a.cmd == "sweep":
        jobs = plan_rows(sweep_rows(grid), seeds, experiment=a.experiment, evaluate_overrides=[VAL_EVAL],
                         store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
        failed = run_jobs(jobs, a.jobs, live=live) if jobs else []
        if failed:
            report_failures(failed, _say)
            return 1
    # the experiment's own model only: the store holds other models' validation runs under the same
    # experiment (the chunked study's tiny_chunk3), and a table compares losses under one recipe
    (mle_root,) = configured_run_roots([f"experiment={a.experiment}", "loss=mle", f"paths.output_dir={a.store}"])
    return sweep_report(len(seeds), grid, experiment=a.experiment, store=a.store, out=a.out, command=command,
                        only_grid=True, model=mle_root.parents[1].name)


def stage_resources(a, experiment: str, overrides: list[str]):
    """(train, evaluate, publish) ``Resources`` of ``experiment``'s jobs and the plan's ``Estimate``: a paper preset's
    training takes one node with ``paper_row.world_size`` GPUs and a task per GPU, its vLLM evaluation
    ``eval.tensor_parallel_size`` GPUs; a CPU preset a task with the preset's threads. Time limits come from the
    estimate (its slow end x the cluster's margin) where there is one; the command's flags and the cluster config
    (``--cluster``) apply last."""
    from numlearn.cli import cluster_config, preset_config
    from numlearn.executors import Resources, paper_estimate

    cfg = preset_config(experiment, overrides, config="evaluate")
    cluster = cluster_config(getattr(a, "cluster", "default"))
    pr = cfg.get("paper_row") or {}
    gpus = int(a.gpus_per_node if a.gpus_per_node is not None else (pr.get("world_size") or 0))
    tp = int(cfg.eval.tensor_parallel_size) if str(cfg.eval.backend) == "vllm" else 0
    est = paper_estimate(cfg, gpus, tp, Path(a.gpu_check) if getattr(a, "gpu_check", None) else None)

    def limit(hours: float | None, default: int) -> int:  # the slow end x the margin, never below the floor
        return max(cluster.min_time_min, math.ceil(hours * cluster.time_margin * 60)) if hours else default

    train = Resources(gpus_per_node=gpus, tasks_per_node=a.tasks_per_node or gpus or 1,
                      cpus_per_task=8 if gpus else int(cfg.train.torch_threads or 1), mem_gb=64 * gpus or None,
                      timeout_min=limit(est.train_h[1] if est.train_h else None, 2880 if gpus else 120))
    train = train.with_overrides(partition=a.partition, cpus_per_task=a.cpus_per_task, mem_gb=a.mem_gb,
                                 timeout_min=a.timeout_min).on_cluster(cluster)
    ev = Resources(gpus_per_node=tp, cpus_per_task=8 if tp else int(cfg.eval.torch_threads or 1),
                   mem_gb=64 * tp or None, timeout_min=limit(est.eval_h, 720 if tp else 120),
                   partition=a.partition).on_cluster(cluster)
    pub = Resources(timeout_min=30, partition=a.partition).on_cluster(cluster)
    return train, ev, pub, est


def submitted(a, jobs, rows: list[Row], seeds: list[int]) -> int:
    """``--executor submitit_local|slurm`` (or ``--plan``): the jobs as a stage graph, submitted once each
    (``numlearn.executors.submit_graph``, a state file per study and executor); the tables as its last stage."""
    from numlearn import executors as ex

    overrides = list(rows[0].extra) if rows else []
    train, ev, pub, est = stage_resources(a, a.experiment, overrides)
    tables = [sys.executable, "-m", "numlearn.pipeline", "tables", "--seeds", str(a.seeds),
              "--rows", ",".join(r.label for r in rows), "--experiment", a.experiment, "--store", str(a.store),
              "--out", str(a.out), "--selected", str(a.selected) if a.selected else "none",
              "--primary-benchmark", a.primary_benchmark, "--family-metrics", a.family_metrics,
              "--command", a.command or a.invocation]
    stages = ex.stage_graph(jobs, train, ev, pub, tables_argv=tables)
    stages[-1].log = a.outputs / "pipeline" / f"{a.experiment}_tables.log"
    folder = a.outputs / "pipeline" / "submitit"
    state_file = a.outputs / "pipeline" / f"{a.experiment}.{a.executor}.state.json"
    if a.plan:  # with a state file from an earlier submission: what is done, running and left (a status view)
        status = None
        if a.executor != "local" and state_file.is_file():
            kind = "local" if a.executor == "submitit_local" else "slurm"
            status = ex.state_view(ex.State(state_file), ex.SubmititExecutor(kind, folder))
        print(ex.plan_text(stages, a.executor, est, status, where={"state": state_file, "jobs": folder,
                                                                    "logs": a.outputs / "pipeline"}))
        return 0
    executor = ex.SubmititExecutor("local" if a.executor == "submitit_local" else "slurm", folder)
    with ex.State(state_file) as state:
        out = ex.submit_graph(stages, executor, state, say=_say, max_running=a.jobs)
    _say(f"[{a.executor}] {len(out.submitted)} submitted, {len(out.resubmitted)} resubmitted, {len(out.running)} "
         f"running or pending, {len(out.done)} done (state: {state.path})")
    if out.failed or out.blocked:
        _say(f"[{a.executor}] failed: {', '.join(out.failed)}" + (f"; not run: {', '.join(out.blocked)}"
                                                                  if out.blocked else "")
             + f"; logs under {a.outputs / 'pipeline'}; run the same command again to resubmit them")
        return 1
    if executor.waits:
        print(table_section(a.out / "table1.md", "Accuracy (%)"))
    return 0


def _tuned(a, live) -> int:
    """``study <name>`` of kind tuned: ``numlearn.studies.tuned`` (selection, choice, rows on fresh seeds)."""
    from numlearn.cli import conf_dir
    from numlearn.studies import tuned

    _refuse_cluster_flags(a)
    if a.tables_only or a.override:
        raise PipelineError(f"study {a.name!r} (kind tuned) takes neither --tables-only nor --override: its stages "
                            "resume with --reuse (a stored result is never trained again) and its recipe is the "
                            "declaration's")
    cfg = study(a.name)
    if a.experiment == EXPERIMENT:  # not given: the study's
        a.experiment = str(cfg.experiment)
    return tuned.run(a, cfg, study_file=Path(conf_dir()) / "study" / f"{a.name}.yaml", run_planned=_run_planned,
                     build_tables=build_tables, family_cls=Family, live=live)


def _study_as_table1(a) -> None:
    """``study <name>`` (kind rows) as the ``table1`` command with the study's rows, experiment, outputs and
    declarations; the other kinds have their own commands."""
    cfg = study(a.name)
    if cfg.kind != "rows":
        named = NAMED_STUDIES[cfg.kind][0]
        raise PipelineError(f"study {a.name!r} is of kind {cfg.kind}, which runs as its named study only (`python -m "
                            f"numlearn.pipeline study {named}`); a study of your own is of kind rows or tuned")
    if a.experiment == EXPERIMENT:  # not given: the study's
        a.experiment = str(cfg.experiment)
    a.rows = ",".join(cfg.rows)
    a.selected = Path(cfg.selected) if cfg.selected else None
    a.out = a.out or Path(cfg.out or f"results/{cfg.name}")
    a.primary_benchmark, a.family_metrics = str(cfg.primary_benchmark), ",".join(cfg.family_metrics)
    a.family = list(cfg.family)
    if a.command is None and cfg.command:
        a.command = f"{cfg.command} SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else "")
    a.compare_with = None
    a.cmd = "tables" if a.tables_only else "table1"


def ablation(a, seeds: list[int], live) -> int:
    """Three stages, each resumable: (1) the ablation rows on every seed and each form's sweep points
    on the sweep's seeds, in one pool; (2) the sweep report, which chooses each form's weight on the
    validation split (stops while a point lacks a seed); (3) the chosen weights' rows on every seed,
    then the tables into ``--out``."""
    sweep_seeds = parse_seeds(a.sweep_seeds)
    rows = [Row(r) for r in ABLATION_ROWS] + [Row.parse(r) for r in ABLATION_CONTROLS]
    grid_rows = [Row("mle")] + [Row(loss, x) for loss, xs in ABLATION_GRID.items() for x in xs]
    common = dict(experiment=a.experiment, store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
    jobs = plan([Request(tuple(rows), tuple(seeds)), Request(tuple(grid_rows), tuple(sweep_seeds), (VAL_EVAL,))],
                **common)
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        report_failures(failed, _say)
        return 1
    command = a.command or (f"make ablation-tiny SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else ""))
    rc = sweep_report(len(sweep_seeds), ABLATION_GRID, experiment=a.experiment, store=a.store, out=a.out / "sweep",
                      command=command, only_grid=True, model=ABLATION_MODEL)
    if rc != 0:
        return rc
    chosen = [r for r in selected_rows(a.out / "sweep" / "selected.json") if r not in rows]
    jobs = plan([Request(tuple(chosen), tuple(seeds))], **common) if chosen else []
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        report_failures(failed, _say)
        return 1
    return build_tables(rows + chosen, seeds, a.out, experiment=a.experiment, store=a.store,
                        selected=a.out / "sweep" / "selected.json", command=command,
                        report=Family(selection_seeds=tuple(sweep_seeds)))


def base_jobs(seeds: list[int], *, experiment: str, outputs: Path, extra: tuple[str, ...] = (),
              python: str = sys.executable, say=print) -> list[Job]:
    """A training job per seed whose base model (``model.source=run``: ``model.base.run`` under
    ``outputs``, trained by ``model.base.train`` and ``extra``) is not complete. A complete base trained under
    another recipe than ``model.base.train`` composes today is an error (its fine-tunes would stand
    on another model): move it away, or fine-tune from it on purpose with ``model.base_model_dir``."""
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir
    from numlearn.records import RunRecord
    from numlearn.rundirs import run_is_complete
    from numlearn.training.model import base_final_dir

    jobs = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for seed in seeds:
            cfg = compose("config", overrides=[f"experiment={experiment}", f"seed={seed}", *extra])
            if cfg.model.get("source") != "run":
                raise PipelineError(f"experiment={experiment}: model {cfg.model.name} is not a fine-tune of a stored "
                                    "run (model.source=run)")
            if cfg.model.get("base_model_dir"):
                continue  # named by hand: build_model checks it
            base = cfg.model.base
            train = [str(o) for o in base.train]
            run_dir = base_final_dir(cfg.model, outputs, seed).parent
            if run_is_complete(run_dir):
                want = training_recipe(compose("config", overrides=[*train, *extra, f"seed={seed}"]))
                have = RunRecord.of_run_dir(run_dir).recipe or {}
                if diff := recipe_differences(have, want):
                    raise PipelineError(f"base {run_dir} was trained under another recipe than {' '.join(train)} "
                                        f"composes now ({'; '.join(diff[:3])}): move it away to retrain it, or "
                                        "name it with model.base_model_dir to fine-tune from it anyway")
                say(f"[base seed={seed}] {run_dir}: complete")
                continue
            say(f"[base seed={seed}] {run_dir}: missing or unfinished, trained first")
            job = Job(f"base seed={seed}", [("train", [python, "-m", "numlearn.train", *train, *extra, f"seed={seed}",
                                                        f"paths.output_dir={outputs}"])],
                      outputs / "pipeline" / f"base_{re.sub(r'[^A-Za-z0-9_.=-]', '_', str(base.run))}_seed={seed}.log")
            jobs.append(job)
    return jobs


def pretrained(a, seeds: list[int], live) -> int:
    """Issue 27's pretrained start: the missing bases first (every seed's MLE base model), then each row
    fine-tunes its seed's base and is evaluated on the target task and the base task, then the tables
    (each row minus MLE, the target task's CoT primary) into ``--out``."""
    extra = tuple(a.override)
    names = [x for x in (a.rows or ",".join(PRETRAINED_ROWS)).split(",") if x]
    rows = [Row.parse(x) for x in names]
    if a.rows is None:
        rows += [r for r in selected_rows(a.selected) if r not in rows]
    rows = [Row(r.loss, r.alpha, (*r.extra, *extra)) for r in rows]
    jobs = plan_rows(rows, seeds, experiment=a.experiment, evaluate_overrides=[], store=a.store, outputs=a.outputs,
                     reuse=a.reuse, say=_say)
    # the bases only where a row still trains: tables from a complete store need none of them
    todo = sorted({int(j.name.rsplit("seed=", 1)[1]) for j in jobs})
    bases = base_jobs(todo, experiment=a.experiment, outputs=a.outputs, extra=tuple(a.base_override),
                      say=_say) if todo else []
    if bases and (failed := run_jobs(bases, a.jobs, live=live)):
        report_failures(failed, _say)
        return 1
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        report_failures(failed, _say)
        return 1
    command = a.command or (f"make pretrained-tiny SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else ""))
    # the chosen weights label their rows "val-chosen" when the table holds every one of them
    chosen = {(r.loss, r.alpha) for r in selected_rows(a.selected)}
    label = chosen and chosen <= {(r.loss, r.alpha) for r in rows}
    return build_tables(rows, seeds, a.out, experiment=a.experiment, store=a.store,
                        selected=a.selected if label else None, command=command,
                        report=Family(primary_benchmark=PRETRAINED_PRIMARY))


def chunked(a, seeds: list[int], live) -> int:
    """Issue 28's table, in the ablation's three resumable stages: (1) MLE on both tokenizers on every
    seed and the chunked model's sweep points on the sweep's seeds; (2) the sweep report on the chunked
    model's runs, which chooses each loss's weight on validation; (3) the chosen rows on every seed,
    then the chunked table (each loss minus chunked MLE) and the tokenisation effect (chunked MLE minus
    single-digit MLE) into ``--out``."""
    from numlearn.reporting import aggregate

    extra = tuple(a.override)
    model = (f"model={CHUNKED_MODEL}", *extra)
    grid = parse_grid(a.grid, CHUNKED_GRID)
    if a.only:
        only = [x for x in a.only.split(",") if x]
        if unknown := [x for x in only if x not in grid]:
            raise PipelineError(f"--only {','.join(unknown)}: not in the grid ({', '.join(grid)})")
        grid = {k: v for k, v in grid.items() if k in only}
    sweep_seeds = parse_seeds(a.sweep_seeds)
    single, mle_chunked = Row("mle", None, extra), Row("mle", None, model)
    grid_rows = [mle_chunked] + [Row(loss, x, model) for loss, xs in grid.items() for x in xs]
    common = dict(experiment=a.experiment, store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
    jobs = plan([Request((single, mle_chunked), tuple(seeds)),
                 Request(tuple(grid_rows), tuple(sweep_seeds), (VAL_EVAL,))], **common)
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        report_failures(failed, _say)
        return 1
    command = a.command or (f"make chunked-tiny SEEDS={a.seeds}" + (" REUSE=1" if a.reuse else ""))
    rc = sweep_report(len(sweep_seeds), grid, experiment=a.experiment, store=a.store, out=a.out / "sweep",
                      command=command, only_grid=True, model=CHUNKED_MODEL)
    if rc != 0:
        return rc
    chosen = [Row(r.loss, r.alpha, model) for r in selected_rows(a.out / "sweep" / "selected.json")]
    jobs = plan([Request(tuple(chosen), tuple(seeds))], **common) if chosen else []
    if (failed := run_jobs(jobs, a.jobs, live=live) if jobs else []):
        report_failures(failed, _say)
        return 1
    rc = build_tables([mle_chunked, *chosen], seeds, a.out, experiment=a.experiment, store=a.store,
                      selected=a.out / "sweep" / "selected.json", command=command,
                      report=Family(selection_seeds=tuple(sweep_seeds)))
    if rc != 0:
        return rc
    runs = table1_runs([single, mle_chunked], seeds, experiment=a.experiment, store=a.store)
    df, _ = aggregate.load_table_results(runs, exclude_benchmarks=[TEST_EXCLUDE], recipe_may_differ_in=("model",))
    md, rows = aggregate.across_models(df, base_model=str(df[df["model"] != CHUNKED_MODEL]["model"].iloc[0]))
    out = a.out / "tokenisation"
    out.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out / "vs_single_digit.csv", index=False)
    (out / "tokenisation.md").write_text(aggregate.header(command, out_dir=out) + "\n\n## MLE chunked minus MLE "
                                         "single-digit\n\n" + md + "\n")
    _say(f"[chunked] tables -> {a.out}, tokenisation effect -> {out / 'tokenisation.md'}")
    return 0


def mle_lr(a, seeds: list[int], live) -> int:
    """MLE tuned as the numeric losses are (issue 59 item 3; conf/study/mle_lr.yaml), three resumable stages:
    (1) the loss at each learning rate of the study's grid on the sweep's seeds, validation split; (2) the rate
    with the highest mean validation accuracy (``reporting.sweep.select_rate``; ``--out``/sweep: the table and
    selected_lr.json); (3) that rate on ``seeds``, which the choice never saw, and the tables of Table 1's rows
    (untuned MLE and the numeric losses at their val-chosen weights) on those seeds, each minus the tuned MLE."""
    import json

    import pandas as pd

    from numlearn.reporting import sweep

    (loss, lrs), = _grid(_MLE_LR).items()
    sweep_seeds = parse_seeds(a.sweep_seeds)
    if overlap := sorted(set(seeds) & set(sweep_seeds)):
        raise PipelineError(f"--seeds {a.seeds} holds seeds the rate is chosen on ({seeds_arg(overlap)}): the tuned "
                            f"MLE is estimated on the others, e.g. --seeds {max(sweep_seeds) + 1}-7")
    default = float(configured_value([f"experiment={a.experiment}"], "train.learning_rate"))
    rates = {rate_row(loss, lr, default): float(lr) for lr in lrs}
    common = dict(experiment=a.experiment, store=a.store, outputs=a.outputs, reuse=a.reuse, say=_say)
    if (failed := _run_planned([Request(tuple(rates), tuple(sweep_seeds), (VAL_EVAL,))], common, a.jobs, live)):
        return failed
    command = a.command or f"{_MLE_LR.command} MLE_LR_SEEDS={a.seeds} SWEEP_SEEDS={a.sweep_seeds}" + (
        " REUSE=1" if a.reuse else "")
    runs = [Path(r) / "eval" / TEST_EXCLUDE for r in table1_runs(list(rates), sweep_seeds, experiment=a.experiment,
                                                                   store=a.store)]
    out = a.out / "sweep"
    with contextlib.redirect_stdout(io.StringIO()):
        rc = sweep.main([*(str(r) for r in runs if r.is_dir()), "--out", str(out), "--command", command,
                         "--recipe-may-differ-in", "train.learning_rate", "--no-plot", "--heading",
                         f"Learning-rate sweep of {loss} (accuracy %, mean over seeds [95% seed-bootstrap CI]; "
                         f"`{loss}` at the recipe's {default:g}, `{loss}_lr<rate>` at another)"])
    if rc != 0:
        return rc
    labels = {r.tag: lr for r, lr in rates.items()}
    chosen, pending = sweep.select_rate(pd.read_csv(out / "sweep.csv"), VAL_COLUMN, labels, default, len(sweep_seeds))
    if chosen is None:
        raise PipelineError(f"the rate sweep is not finished: {', '.join(pending)} on {VAL_COLUMN!r}; run the same "
                            "command again with --reuse")
    (out / "selected_lr.json").write_text(json.dumps(chosen, indent=2) + "\n")
    with (out / "sweep.md").open("a", encoding="utf-8") as f:
        f.write(f"\n## Learning rate chosen on `{VAL_COLUMN}` (highest mean accuracy; ties: the recipe's "
                f"{default:g})\n\n" + "".join(f"- {lr}: {acc:.1f} %\n" for lr, acc in chosen["candidates"].items())
                + f"\n{loss}: learning rate {chosen['learning_rate']:g} (row `{chosen['label']}`)\n")
    tuned = rate_row(loss, chosen["learning_rate"], default)
    rows = list(dict.fromkeys([Row(loss), tuned, *selected_rows(Path(_MLE_LR.selected))]))
    if (failed := _run_planned([Request(tuple(rows), tuple(seeds))], common, a.jobs, live)):
        return failed
    _say(f"[mle-lr] {loss} at learning rate {chosen['learning_rate']:g} (the recipe's: {default:g}); every row "
         f"minus `{chosen['label']}` on seeds {seeds_arg(seeds)}")
    report = Family(primary_benchmark=str(_MLE_LR.primary_benchmark), selection_seeds=tuple(sweep_seeds),
                    baseline=chosen["label"], may_differ=("train.learning_rate",),
                    family_metrics=tuple(_MLE_LR.family_metrics))
    rc = build_tables(rows, seeds, a.out, experiment=a.experiment, store=a.store, selected=Path(_MLE_LR.selected),
                      command=command, report=report)
    if rc != 0 or a.experiment != EXPERIMENT:
        return rc
    # the ablation's rows (its study's runs, from the store: nothing trains here) against the same tuned MLE
    selected = ABLATION_OUT / "sweep" / "selected.json"
    ablation = [Row(r) for r in ABLATION_ROWS] + [Row.parse(r) for r in ABLATION_CONTROLS]
    ablation = list(dict.fromkeys([tuned, *ablation, *selected_rows(selected)]))
    return build_tables(ablation, seeds, a.out / "ablation", experiment=a.experiment, store=a.store, selected=selected,
                        command=command, report=report)


def _run_planned(requests, common: dict, jobs: int, live) -> int:
    """Plan ``requests`` and run what is missing; 1 after naming the failures, 0 when every job ended."""
    todo = plan(requests, say=_say, **{k: v for k, v in common.items() if k != "say"})
    if (failed := run_jobs(todo, jobs, live=live) if todo else []):
        report_failures(failed, _say)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
