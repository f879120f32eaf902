"""What a study runs: rows x seeds as jobs, planned from the configs and the store.

A **row** is a loss with optional weight and extra overrides, written ``loss[:alpha][+key=value...]``
(``del``, ``del:1.28``, ``del:1.28+loss.form=paper``). **Seeds**: ``8`` = seeds 0..7, ``3-7`` a range,
``0,2,5`` a list. ``plan`` makes one job per (row, seed) -- train, each evaluation, publish into the store --
seed-major, and with ``reuse`` only for the seeds the store lacks a usable result for (missing, or trained
under another recipe: the reason is said). The run directories come from composing the configs, never from
string templates, so a plan and a run agree on where things are."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from numlearn.jobs import Job, PipelineError
from numlearn.rundirs import (
    data_file_hashes,
    input_differences,
    recipe_differences,
    seed_list,
    training_recipe,
)


# -- what to run ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    loss: str
    alpha: float | None = None
    extra: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Row:
        head, *extra = spec.split("+")
        loss, _, alpha = head.partition(":")
        if not re.fullmatch(r"[a-z0-9_]+", loss):
            raise PipelineError(f"row {spec!r}: write loss[:alpha][+key=value...], e.g. del:1.28+loss.form=paper")
        try:
            a = weight(alpha) if alpha else None
        except ValueError as e:
            raise PipelineError(f"row {spec!r}: {e}") from None
        for e in extra:
            if "=" not in e:
                raise PipelineError(f"row {spec!r}: {e!r} is not a key=value override")
        return cls(loss, a, tuple(extra))

    @property
    def tag(self) -> str:
        """The name the results give this row's loss: its ``loss.tag=`` override (a rate row's ``mle_lr0.0015``),
        else the loss."""
        return next((e.split("=", 1)[1] for e in self.extra if e.startswith("loss.tag=")), self.loss)

    @property
    def label(self) -> str:
        head = self.loss if self.alpha is None else f"{self.loss}:{_fmt(self.alpha)}"
        return "+".join((head, *self.extra))

    def overrides(self) -> list[str]:
        return [f"loss={self.loss}", *([f"loss.alpha={_fmt(self.alpha)}"] if self.alpha is not None else []),
                *self.extra]


def weight(text: str) -> float:
    """A loss weight as a row or grid spells it: a finite number >= 0 (``loss.alpha``'s range in the schema);
    ``ValueError`` naming the text otherwise (``nan``, ``inf``, ``-1``, ``abc``)."""
    from numlearn.schema import LossConfig

    rng = LossConfig.__dataclass_fields__["alpha"].metadata["range"]
    try:
        a = float(text)
    except ValueError:
        raise ValueError(f"alpha {text!r} is not a number") from None
    if (why := rng.problem(a)) is not None:
        raise ValueError(f"alpha {text!r} must be {why}")
    return a


def int_at_least(lo: int):
    """An argparse type: an integer >= ``lo`` (``--jobs``: 1, ``--from-seed``: 0); anything else one line."""
    import argparse

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = lo - 1
        if n < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: give an integer >= {lo}")
        return n

    return parse


positive_int, nonneg_int = int_at_least(1), int_at_least(0)


def _fmt(x: float) -> str:
    """A weight as the run dirs spell it (``alpha=1.0``, ``alpha=0.01``): Hydra reads ``1`` as an int."""
    return repr(float(x))


def parse_seeds(spec: str | int) -> list[int]:
    """``8`` -> 0..7 (a count, as ``SEEDS=8``), ``3-7`` -> 3..7, ``0,2,5`` -> those."""
    s = str(spec).strip()
    if re.fullmatch(r"\d+", s):
        n = int(s)
        if n < 1:
            raise PipelineError(f"--seeds {s}: give at least one seed (a count, a-b or a,b,c)")
        return list(range(n))
    if m := re.fullmatch(r"(\d+)-(\d+)", s):
        a, b = int(m.group(1)), int(m.group(2))
        if b < a:
            raise PipelineError(f"--seeds {s}: the range is empty (write low-high)")
        return list(range(a, b + 1))
    try:
        return seed_list(f"seed={s}")
    except ValueError as e:
        raise PipelineError(f"--seeds {s}: {e}") from None


def seeds_arg(seeds: list[int]) -> str:
    return ",".join(map(str, seeds))


AUTO_SELECTED = "auto"


def selected_arg(value: str) -> Path | str | None:
    """``--selected``: a selected.json, ``none`` (no chosen weights added, no row labelled val-chosen), or
    ``auto`` (the default: the tiny sweep's choice for the tiny recipe, none for any other preset)."""
    v = value.strip().lower()
    return None if v == "none" else AUTO_SELECTED if v == AUTO_SELECTED else Path(value)


def selected_rows(path: Path | None) -> list[Row]:
    """The sweep's validation-chosen weights as rows (none before ``sweep`` has chosen, or for ``None``)."""
    if path is None or not path.is_file():
        return []
    try:
        chosen = json.loads(path.read_text())
        return [Row(loss, float(v["alpha"])) for loss, v in chosen.items()]
    except (ValueError, KeyError, TypeError) as e:
        raise PipelineError(f"{path} is not the sweep's selected.json ({e}): rerun `make sweep-report`") from None


def sweep_rows(grid: dict[str, tuple[float, ...]]) -> list[Row]:
    return [Row("mle")] + [Row(loss, a) for loss, alphas in grid.items() for a in alphas]


def rate_row(loss: str, lr: float, default: float) -> Row:
    """``loss`` trained at learning rate ``lr`` (an MLE learning-rate sweep): the plain row at the recipe's own
    rate ``default``, else a row with its own run dirs, ``loss.tag={loss}_lr{lr:g}`` (mle_lr0.0015)."""
    if float(lr) == float(default):
        return Row(loss)
    return Row(loss, None, (f"loss.tag={loss}_lr{float(lr):g}", f"train.learning_rate={_fmt(lr)}"))


def configured_value(overrides: list[str], key: str):
    """The value at ``key`` (``train.learning_rate``) of the training config ``overrides`` compose."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.cli import conf_dir

    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        return OmegaConf.select(compose("config", overrides=overrides), key)


def parse_grid(items: list[str], base: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
    """``base`` with each ``loss=a,b,c`` item replacing a loss's grid."""
    grid = dict(base)
    for it in items:
        loss, _, vals = it.partition("=")
        try:
            grid[loss] = tuple(weight(v) for v in vals.split(",") if v)
        except ValueError as e:
            raise PipelineError(f"--grid {it!r}: {e}; write loss=a,b,c") from None
        if not grid[loss]:
            raise PipelineError(f"--grid {it!r} names no weight")
    return grid


# -- the configs: run dirs and the store ----------------------------------------------------------
def _seed_override(o: str) -> list[int]:
    """The seeds of a ``seed=`` override: a range (``seed=3-7``) or a list (``seed=0,1,2``)."""
    return parse_seeds(o.split("=", 1)[1]) if re.fullmatch(r"seed=\d+-\d+", o) else seed_list(o)


def configured_run_roots(overrides: list[str]) -> list[Path]:
    """One run root (seed level stripped) per value of a comma-separated ``loss=`` override; with a
    ``seed=`` override (``seed=0,1,2``), the run directories of those seeds instead."""
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir

    losses, seeds, rest = ["mle"], None, []
    for o in overrides:
        if o.startswith("loss="):
            losses = o.split("=", 1)[1].split(",")
        elif o.startswith("seed="):
            seeds = _seed_override(o)
        else:
            rest.append(o)
    out = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for loss in losses:
            for seed in seeds or [None]:
                cfg = compose("config", overrides=[*rest, f"loss={loss}", *([f"seed={seed}"] if seeds else [])])
                out.append(Path(cfg.run_dir) if seeds else Path(cfg.run_dir).parent)
    return out


def stored_result_problem(d: Path, protocol: str, limit, recipe: dict, data_files: dict | None = None) -> str | None:
    """Why the store's result in ``d`` (``.../eval/<benchmark>/<mode>``) cannot stand for this run;
    None when it can. ``data_files``: the run's local data files' hashes now (``rundirs.data_file_hashes``),
    compared with those its training recorded."""
    from numlearn.records import RESULT
    from numlearn.reporting.store import read_result

    found = [f for f in (d / RESULT, d / f"result.{protocol}.json") if f.exists()]
    if not found:
        return "no result"
    why = []
    for f in found:
        r = read_result(f)
        if r.protocol != protocol:
            why.append(f"protocol {r.protocol}")
            continue
        if r.limit != limit:
            why.append(f"problem limit {r.limit}")
            continue
        # the recipe the model was trained with (run.json, through the evaluator)
        diff = recipe_differences(training_recipe(r.training_config), recipe)
        if diff:
            why.append("trained with another recipe (" + "; ".join(diff[:4]) + (" ..." if len(diff) > 4 else "") + ")")
            continue
        if diff := input_differences((r.run or {}).get("inputs"), {"data_files": data_files or {}}):
            why.append("trained on other data (" + "; ".join(diff[:3]) + ")")
            continue
        return None
    return ", ".join(why)


def pending_seeds(overrides: list[str], store: str | Path, report=None) -> list[int]:
    """The seeds of ``overrides`` (``seed=0,1,2``) without a usable stored result for every
    benchmark and mode of their ``eval`` config (``stored_result_problem``). ``report(seed, why)``
    hears the reason for each."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.cli import conf_dir
    from numlearn.evaluation.spec import BenchmarkSpec
    from numlearn.schema import check_ranges

    seeds, rest = [0], []
    for o in overrides:
        if o.startswith("seed="):
            seeds = _seed_override(o)
        else:
            rest.append(o)
    store = Path(store)
    todo = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for seed in seeds:
            cfg = compose("evaluate", overrides=[*rest, f"seed={seed}"])
            check_ranges(cfg)  # a NaN weight or a negative step count in an --override: refused before any job
            outputs = Path(str(cfg.paths.output_dir)).resolve()
            try:
                rel = Path(str(cfg.eval_dir)).resolve().relative_to(outputs)
            except ValueError:
                raise ValueError(f"eval_dir {cfg.eval_dir} is outside paths.output_dir {outputs}: the store mirrors "
                                 "the output directory, so leave eval_dir at its default") from None
            ecfg = cfg.eval
            limit = OmegaConf.to_container(ecfg).get("limit")
            protocol = str(ecfg.protocol)
            recipe = training_recipe(cfg)
            files = data_file_hashes(cfg.data, Path(str(cfg.paths.data_dir)).expanduser())
            problems = {f"{name}/{mode}": stored_result_problem(store / rel / name / mode, protocol, limit, recipe, files)
                        for name, bcfg in ecfg.benchmarks.items()
                        for mode in BenchmarkSpec.from_config(bcfg).modes(ecfg.modes)}
            bad = {k: v for k, v in problems.items() if v is not None}
            if bad:
                todo.append(seed)
                if report:
                    report(seed, "; ".join(f"{k}: {v}" for k, v in bad.items()))
    return todo


def row_job(row: Row, seed: int, *, experiment: str, evaluations: list[tuple[str, ...]], store: Path,
            outputs: Path, python: str = sys.executable, prune: bool = False) -> Job:
    """Train (row, seed), run each evaluation (a tuple of evaluate overrides: ``()`` the preset's test
    evaluation, ``("eval=synthetic_val",)`` the sweep's), publish the run's result files; with ``prune``, then
    delete the run's weights (``numlearn.rundirs prune``: a study whose runs are too big to keep)."""
    base = [f"experiment={experiment}", *row.overrides(), f"seed={seed}"]
    (run,) = configured_run_roots([f"experiment={experiment}", *row.overrides(), f"paths.output_dir={outputs}",
                                   f"seed={seed}"])
    steps = [("train", [python, "-m", "numlearn.train", "-m", *base, f"paths.output_dir={outputs}"])]
    for ev in evaluations:
        steps.append(("evaluate" + (f" {ev[0].split('=', 1)[-1]}" if ev else ""),
                      [python, "-m", "numlearn.evaluate", "-m", *base, f"paths.output_dir={outputs}", *ev]))
    steps.append(("publish", [python, "-m", "numlearn.reporting.store", "publish", str(run), "--outputs",
                              str(outputs), "--store", str(store)]))
    if prune:
        steps.append(("prune", [python, "-m", "numlearn.rundirs", "prune", str(run)]))
    safe = re.sub(r"[^A-Za-z0-9_.:=+-]", "_", f"{row.label}_seed={seed}")
    return Job(f"{row.label} seed={seed}", steps, outputs / "pipeline" / f"{safe}.log")


@dataclass(frozen=True)
class Request:
    """Rows x seeds, each evaluated with ``evaluate`` (evaluate overrides; ``()``: the preset's test split)."""

    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    evaluate: tuple[str, ...] = ()


def plan(requests: list[Request], *, experiment: str, store: Path, outputs: Path, reuse: bool,
         say=print, prune: bool = False) -> list[Job]:
    """A job per (row, seed), seed-major (every row's seed 0 first, so a sitting cut short leaves
    whole seeds), each publishing its result files as soon as it ends. A (row, seed) that several
    requests want is one job with their evaluations in turn (never two trainings of one run dir at
    once). With ``reuse``, only what the store lacks."""
    wanted: dict[tuple[str, int], tuple[Row, list[tuple[str, ...]]]] = {}
    for req in requests:
        for row in req.rows:
            todo = list(req.seeds)
            tag = f"[{row.label}{' ' + ' '.join(req.evaluate) if req.evaluate else ''}]"
            if reuse:
                def report(seed, why, tag=tag):
                    say(f"{tag} seed={seed}: {why}")
                todo = pending_seeds([f"experiment={experiment}", *row.overrides(), f"seed={seeds_arg(todo)}",
                                      *req.evaluate], store, report=report)
                if not todo:
                    say(f"{tag} every seed has stored results (--reuse): nothing to run")
                    continue
                say(f"{tag} seeds without stored results: {seeds_arg(todo)}")
            runs = configured_run_roots([f"experiment={experiment}", *row.overrides(), f"paths.output_dir={outputs}",
                                         f"seed={seeds_arg(todo)}"])
            for seed, run in zip(todo, runs):  # keyed by the run dir: "del_paper" and "del_paper:1.28" are one
                evs = wanted.setdefault((str(run), seed), (row, []))[1]
                if req.evaluate not in evs:
                    evs.append(req.evaluate)
    order = sorted(wanted, key=lambda k: k[1])  # stable: rows keep their order within a seed
    return [row_job(wanted[k][0], k[1], experiment=experiment, evaluations=wanted[k][1], store=store,
                    outputs=outputs, prune=prune) for k in order]


def plan_rows(rows: list[Row], seeds: list[int], *, experiment: str, evaluate_overrides: list[str], store: Path,
              outputs: Path, reuse: bool, say=print) -> list[Job]:
    """``plan`` of one request: ``rows`` x ``seeds``, one evaluation."""
    return plan([Request(tuple(rows), tuple(seeds), tuple(evaluate_overrides))], experiment=experiment, store=store,
                outputs=outputs, reuse=reuse, say=say)


def table1_runs(rows: list[Row], seeds: list[int], *, experiment: str, store: Path) -> list[str]:
    """The store's run directories of ``rows`` x ``seeds`` (what the tables read)."""
    out = []
    for row in rows:
        out += [str(p) for p in configured_run_roots([f"experiment={experiment}", *row.overrides(),
                                                      f"paths.output_dir={store}", f"seed={seeds_arg(seeds)}"])]
    return out
