"""A study of kind ``tuned`` (``conf/study/<name>.yaml``; ``python -m numlearn.pipeline study <name>``): every
tuned row gets the same selection budget, then the rows are estimated on seeds the selection never saw.

Three stages, each resumable (``--reuse``):

1. **selection**: each loss of ``rates`` at each learning rate, and each loss of ``grid`` at each weight, on the
   ``selection_seeds``, evaluated with ``evaluate`` only (a held-out slice of the training data);
2. **choice**: per loss, the configuration with the highest mean accuracy on ``select_on`` -- a rate with ties to
   the recipe's own, then the lower (``reporting.sweep.select_rate``); a weight with ties to the lower
   (``reporting.sweep.select``) -- written to ``<out>/selection/`` (``sweep.md``, ``selected.json``,
   ``selected_lr.json``), and refused while a point lacks a seed;
3. **rows**: ``rows`` on the declared ``seeds`` (``LOSS@chosen``: LOSS at its choice; ``LOSS@chosen:OTHER``: LOSS
   at the weight chosen for OTHER), each run evaluated with every ``row_evaluate``; then the tables and the
   robustness report, every row minus the tuned baseline (the first row, which must be the rate-tuned one), over
   the declared family (``family_metrics`` x ``primary_modes`` on ``primary_benchmark`` plus the held-out metrics),
   Holm-adjusted; the header names the declaration's commit and what the study declared.

With ``keep_weights: false`` each run's weights are deleted once its results are published (``numlearn.rundirs
prune``). Nothing here trains or evaluates in-process: the jobs are the pipeline's (``numlearn.planning``).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from numlearn.planning import (
    PipelineError,
    Request,
    Row,
    configured_value,
    parse_seeds,
    rate_row,
    seeds_arg,
    table1_runs,
)

CHOSEN = "chosen"


@dataclass(frozen=True)
class Choice:
    """What the selection chose: learning rates and weights per loss, and the recipe's rate."""

    rates: dict[str, float]
    weights: dict[str, float]
    default_lr: float

    def row(self, spec: str) -> Row:
        """A declared row: ``LOSS@chosen``, ``LOSS@chosen:OTHER`` or a plain ``loss[:alpha][+k=v]``."""
        if "@" not in spec:
            return Row.parse(spec)
        loss, _, what = spec.partition("@")
        key, _, other = what.partition(":")
        if key != CHOSEN:
            raise PipelineError(f"row {spec!r}: write LOSS@chosen or LOSS@chosen:OTHER")
        src = other or loss
        if not other and src in self.rates:
            return rate_row(loss, self.rates[src], self.default_lr)
        if src not in self.weights:
            raise PipelineError(f"row {spec!r}: {src} has no chosen weight (the study's grid tunes "
                                f"{', '.join(sorted(self.weights)) or 'nothing'})")
        return Row(loss, self.weights[src])


def selection_rows(cfg, default_lr: float) -> tuple[dict[str, dict[Row, float]], list[Row]]:
    """(per rate-tuned loss: its rows -> learning rate, the weight-tuned rows) of the selection stage."""
    rates = {loss: {rate_row(loss, lr, default_lr): float(lr) for lr in lrs} for loss, lrs in cfg.rates.items()}
    return rates, [Row(loss, float(w)) for loss, ws in cfg.grid.items() for w in ws]


def declaration_commit(path: Path) -> str | None:
    """The commit that last changed the study's declaration (``git log -1 -- <file>``); None outside a checkout or
    while the file has uncommitted changes (a declaration is what was committed before the runs)."""
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", str(path)], capture_output=True, text=True,
                               check=True).stdout.strip()
        sha = subprocess.run(["git", "log", "-1", "--format=%H", "--", str(path)], capture_output=True, text=True,
                             check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return None if dirty or not sha else sha


def choose(cfg, rates: dict[str, dict[Row, float]], *, default_lr: float, runs: list[str], out: Path,
           command: str) -> Choice:
    """Stage 2: the selection table (``reporting.sweep``) and each loss's choice, written to ``out``."""
    import pandas as pd

    from numlearn.reporting import sweep

    n = len(cfg.selection_seeds)
    expect = [x for loss, ws in cfg.grid.items() for x in ("--expect", f"{loss}={','.join(str(w) for w in ws)}")]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = sweep.main([*runs, "--out", str(out), "--command", command, "--recipe-may-differ-in",
                         "train.learning_rate", "--no-plot", "--select-on", str(cfg.select_on), *expect,
                         "--min-seeds", str(n), "--heading",
                         f"Selection on `{cfg.select_on}` (accuracy %, mean over seeds {seeds_arg(list(cfg.selection_seeds))}; "
                         "`<loss>_lr<rate>`: a learning rate other than the recipe's)"])
    chosen_w = json.loads((out / "selected.json").read_text()) if (out / "selected.json").is_file() else {}
    if rc != 0 or set(chosen_w) != set(cfg.grid):
        raise PipelineError(f"the selection is not finished (see {out / 'sweep.md'}): run the same command again "
                            "with --reuse")
    table = pd.read_csv(out / "sweep.csv")
    chosen_lr = {}
    for loss, rows in rates.items():
        labels = {r.tag: lr for r, lr in rows.items()}
        c, pending = sweep.select_rate(table, str(cfg.select_on), labels, default_lr, n)
        if c is None:
            raise PipelineError(f"the {loss} rate selection is not finished: {', '.join(pending)}; run the same "
                                "command again with --reuse")
        chosen_lr[loss] = c
    (out / "selected_lr.json").write_text(json.dumps(chosen_lr, indent=2) + "\n")
    with (out / "sweep.md").open("a", encoding="utf-8") as f:
        f.write("".join(f"- {loss}: learning rate {c['learning_rate']:g} ({c['accuracy']:.1f} %; the recipe's "
                        f"{default_lr:g})\n" for loss, c in chosen_lr.items()))
    return Choice({k: float(c["learning_rate"]) for k, c in chosen_lr.items()},
                  {k: float(c["alpha"]) for k, c in chosen_w.items()}, default_lr)


def run(a, cfg, *, study_file: Path, run_planned, build_tables, family_cls, live) -> int:
    """The three stages of ``cfg`` (a ``StudyConfig`` of kind tuned); ``a``: the pipeline's ``study`` arguments.
    ``run_planned``, ``build_tables`` and ``family_cls`` are the pipeline's (passed in: the pipeline imports this)."""
    seeds = parse_seeds(a.seeds)
    sel = [int(s) for s in cfg.selection_seeds]
    if not sel or not cfg.select_on or not cfg.evaluate or not cfg.exclude:
        raise PipelineError(f"study {cfg.name}: a tuned study declares selection_seeds, select_on, evaluate and "
                            "exclude (the selection's benchmarks, kept out of the tables)")
    if overlap := sorted(set(seeds) & set(sel)):
        raise PipelineError(f"--seeds {seeds_arg(seeds)} holds seeds the selection trains ({seeds_arg(overlap)}): the "
                            f"rows are estimated on the others (the declaration's: {cfg.seeds})")
    experiment = str(a.experiment)
    default_lr = float(configured_value([f"experiment={experiment}"], "train.learning_rate"))
    rates, weights = selection_rows(cfg, default_lr)
    common = dict(experiment=experiment, store=a.store, outputs=a.outputs, reuse=a.reuse, prune=not cfg.keep_weights)
    sel_rows = [r for rows in rates.values() for r in rows] + weights
    if (failed := run_planned([Request(tuple(sel_rows), tuple(sel), tuple(cfg.evaluate))], common, a.jobs, live)):
        return failed
    out = Path(a.out or cfg.out or f"results/{cfg.name}")
    command = a.command or f"{cfg.command or 'python -m numlearn.pipeline study ' + cfg.name} SEEDS={seeds_arg(seeds)}"
    sel_runs = [str(Path(r) / "eval" / b) for r in table1_runs(sel_rows, sel, experiment=experiment, store=a.store)
                for b in cfg.exclude if (Path(r) / "eval" / b).is_dir()]
    choice = choose(cfg, rates, default_lr=default_lr, runs=sel_runs, out=out / "selection", command=command)
    rows = list(dict.fromkeys(choice.row(spec) for spec in cfg.rows))
    evals = [tuple(ev) for ev in cfg.row_evaluate] or [()]
    if (failed := run_planned([Request(tuple(rows), tuple(seeds), ev) for ev in evals], common, a.jobs, live)):
        return failed
    report = family_cls(primary_benchmark=str(cfg.primary_benchmark), selection_seeds=tuple(sel),
                        baseline=rows[0].tag,
                        may_differ=("train.learning_rate",), family_metrics=tuple(cfg.family_metrics),
                        family=tuple(cfg.family), primary_modes=tuple(cfg.primary_modes),
                        exclude=tuple(cfg.exclude))
    rc = build_tables(rows, seeds, out, experiment=experiment, store=a.store, selected=out / "selection" /
                      "selected.json", command=command, report=report)
    if rc == 0:
        stamp(out, declaration_line(cfg, study_file))
    return rc


def declaration_line(cfg, study_file: Path) -> str:
    """The header line naming the declaration's commit and what it declared (its power statement)."""
    commit = declaration_commit(study_file)
    where = f"`conf/study/{study_file.name}` at {commit}" if commit else \
        f"`conf/study/{study_file.name}`, uncommitted or changed since its commit: NOT a pre-registration"
    text = " ".join(str(cfg.declaration or "").split())
    return f"- declaration: {where}" + (f"; {text}" if text else "")


def stamp(out: Path, line: str) -> None:
    """Put ``line`` under the ``- git:`` line of every generated table header in ``out`` (idempotent)."""
    for md in sorted(out.rglob("*.md")):
        lines = [x for x in md.read_text(encoding="utf-8").split("\n") if not x.startswith("- declaration: ")]
        at = next((i for i, x in enumerate(lines[:8]) if x.startswith("- git: ")), None)
        if at is not None:
            md.write_text("\n".join([*lines[:at + 1], line, *lines[at + 1:]]), encoding="utf-8")
