"""The pipeline's contract, at the bottom of the house (imports nothing of numlearn): where a run
directory keeps its records, and the two records every stage writes or reads.

    <run_dir>/run.json                              RunRecord: what training made (written by numlearn.train)
    <run_dir>/final/                                the model
    <eval_dir>/<benchmark>/<mode>/generations.jsonl the completions (numlearn.evaluate)
    <eval_dir>/<benchmark>/<mode>/result.json       ResultRecord: the metrics under the evaluation's protocol
    <eval_dir>/<benchmark>/<mode>/result.<p>.json   the same generations rescored under protocol <p>

Each record has one ``read()`` that validates a file and upgrades older ones (schema 1: the files
written before records carried a version) in one place, and an atomic ``write()``. Training,
evaluation, rescoring, the store, the tables and the notebook all go through them, so a field added
or renamed changes here and nowhere else.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

SCHEMA = 2  # 1: files written before this module (no "schema" key); 2: "schema" recorded, protocol always set

RUN_META = "run.json"
FINAL = "final"
RESULT = "result.json"
GENERATIONS = "generations.jsonl"
DEFAULT_PROTOCOL = "strict"  # what a schema-1 result without a "protocol" key was scored under
RUN_STATUSES = ("running", "complete", "dry_run", "failed")  # failed: stopped by a check (run.json says why)


class BadRecord(ValueError):
    """A file that is not a readable record: the message names the file, what is wrong and the fix."""


def result_path(eval_dir: str | Path, benchmark: str, mode: str, protocol: str | None = None) -> Path:
    """Where the result of ``benchmark``/``mode`` lives: ``result.json`` (the evaluation's own
    protocol) or, for a rescoring, ``result.<protocol>.json``."""
    return Path(eval_dir) / benchmark / mode / (RESULT if protocol is None else f"result.{protocol}.json")


def is_result_file(p: Path) -> bool:
    """An evaluator's result file: ``eval/<benchmark>/<mode>/result[.<protocol>].json``."""
    return p.parent.parent.parent.name == "eval" and (p.name == RESULT or (
        p.name.startswith("result.") and p.name.endswith(".json") and p.name.count(".") == 2))


def own_tmp(path: str | Path) -> Path:
    """``path``'s temporary sibling private to this process (``<name>.<pid>.tmp``): several processes writing the
    same file at once (ranks, a multirun's jobs) each write their own and rename it into place."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


# -- portable records: a committed result names what it read relative to the repository, never by the absolute
# path of the machine that wrote it (issue 58 item 8). An absolute path through one of the repository's own
# directories keeps its tail from there (``/work/x/outputs/a`` -> ``outputs/a``); a data root's benchmark or
# training file becomes ``data/...``, the default data root (its sha256 is recorded beside it).
_ANCHORED = re.compile(r"(?<![\w.:/])/(?:[\w.+=@-]+/)*?(outputs|data_cache|assets)(?=/)")
_DATA_ROOT = re.compile(r"(?<![\w.:/])/(?:[\w.+=@-]+/)*?data(?=/(?:benchmarks|train)/|[\"'`\s)]|$)")


def portable_text(text: str) -> str:
    """``text`` with every absolute path through ``outputs/``, ``data_cache/`` or ``assets/`` cut to start there,
    and a data root (``.../data`` holding ``benchmarks/`` or ``train/``) written as ``data``; the rest as it is."""
    return _DATA_ROOT.sub("data", _ANCHORED.sub(lambda m: m.group(1), text))


def portable(tree):
    """A JSON tree with ``portable_text`` applied to every string that is an absolute path."""
    if isinstance(tree, dict):
        return {k: portable(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [portable(v) for v in tree]
    if isinstance(tree, str) and tree.startswith("/"):
        return portable_text(tree)
    return tree


def write_via_tmp(path: str | Path, write) -> None:
    """``write(tmp)`` into this process's ``own_tmp(path)``, then rename it onto ``path``: a reader never sees a
    half-written file and two writers never write into one."""
    tmp = own_tmp(path)
    write(tmp)
    os.replace(tmp, path)


def write_atomic(path: str | Path, obj) -> None:
    """Write ``obj`` as JSON so that a reader never sees a half-written file (``write_via_tmp``)."""
    write_via_tmp(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str)))


def _load(path: Path, kind: str) -> dict:
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRecord(f"{path}: not a readable {kind} ({type(e).__name__}: {e}); re-run the step that writes "
                        "it, or delete it") from None
    if not isinstance(d, dict):
        raise BadRecord(f"{path}: a {kind} is a JSON object, this is a {type(d).__name__}; re-run the step that "
                        "writes it, or delete it")
    version = d.get("schema", 1)
    if not isinstance(version, int) or version > SCHEMA:
        raise BadRecord(f"{path}: {kind} schema {version!r}, this numlearn reads up to {SCHEMA}; upgrade numlearn "
                        "(pip install -e .) to read it")
    return d


def _split(cls, d: dict) -> tuple[dict, dict]:
    names = {f.name for f in fields(cls)} - {"extra", "path"}
    return {k: v for k, v in d.items() if k in names}, {k: v for k, v in d.items() if k not in names}


# What a result carries of its run (``ResultRecord.run``), so a table needs no run directory.
RUN_SUMMARY_KEYS = ("experiment", "model", "loss", "loss_tag", "alpha", "seed", "run_dir", "loss_repr",
                    "aux_effective_weight", "harness", "aux_normalization", "ce_normalization", "templates",
                    "heldout", "recipe", "recipe_sha")


@dataclass
class RunRecord:
    """``run.json``: what a training run is and where it stands. ``recipe`` is what decides the
    weights (the store compares it); ``heldout`` the teacher-forced digit metrics (schema 1 files
    only: newer runs leave measurement to the evaluator)."""

    status: str
    experiment: str | None = None
    model: str | None = None
    loss: str | None = None
    loss_tag: str | None = None
    alpha: float | None = None
    seed: int | None = None
    run_dir: str | None = None
    recipe: dict | None = None
    recipe_sha: str | None = None
    heldout: dict | None = None
    git: dict | None = None
    schema: int = SCHEMA
    extra: dict = field(default_factory=dict)  # every other key, kept as written
    path: Path | None = field(default=None, compare=False)

    @property
    def row(self) -> str:
        """The name of the row this run stands in (``del_paper``), else its loss's."""
        return self.loss_tag or self.loss or "?"

    @classmethod
    def from_dict(cls, d: dict, path: str | Path | None = None) -> RunRecord:
        where = path or "run record"
        if d.get("status") not in RUN_STATUSES:
            raise BadRecord(f"{where}: status {d.get('status')!r} is none of {RUN_STATUSES}; re-run the training "
                            "(the same overrides resume it)")
        known, extra = _split(cls, d)
        known["schema"] = SCHEMA  # schema 1 differs only by lacking the key
        return cls(**known, extra=extra, path=Path(path) if path else None)

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        return cls.from_dict(_load(Path(path), "run record (run.json)"), path)

    @classmethod
    def of_run_dir(cls, run_dir: str | Path) -> RunRecord | None:
        p = Path(run_dir) / RUN_META
        return cls.read(p) if p.is_file() else None

    @classmethod
    def of_model(cls, model_path: str | Path) -> RunRecord | None:
        """The record of the run whose ``final/`` is ``model_path``; None for a model that no
        numlearn run produced (a hub name, another directory)."""
        p = Path(model_path)
        return cls.of_run_dir(p.parent) if p.name == FINAL else None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "path")}
        for k in ("loss_tag", "heldout"):  # a row named by its loss; a run that measured nothing
            if d[k] is None:
                del d[k]
        return {**self.extra, **d}

    def summary(self) -> dict:
        """What a result file carries of this run (``RUN_SUMMARY_KEYS``, plus the training commit)."""
        d = self.to_dict()
        out = {k: d.get(k) for k in RUN_SUMMARY_KEYS if k != "loss_tag"}
        if self.loss_tag:
            out["loss_tag"] = self.loss_tag
        if d.get("base"):  # a fine-tune of a stored base run (model.source=run): which base, which weights
            out["base"] = d["base"]
        if d.get("inputs"):  # the content hashes of what it trained on (numlearn.rundirs.data_inputs)
            out["inputs"] = d["inputs"]
        out["train_git"] = self.git
        env = d.get("environment") or {}
        # where it was trained: the CPU's kernels decide the last bits of every weight (store.compare)
        out["train_environment"] = {k: env[k] for k in ("platform", "cpu", "cpu_capability", "torch_threads", "device")
                                    if k in env}
        return out

    def write(self, path: str | Path | None = None) -> None:
        write_atomic(path or self.path, self.to_dict())


@dataclass
class ResultRecord:
    """``result.json``: one model on one benchmark in one mode, scored under one protocol.

    ``benchmark``: the benchmark's description (``name``, ``kind``, ``spec``, file hashes);
    ``metrics``: ``accuracy``, ``n`` and the numeric metrics; ``correct_by_id`` /
    ``distance_by_id``: per-problem scores (what the seed-aware intervals resample); ``run``: the
    run's summary (``RunRecord.summary``; empty for a model no numlearn run made); ``config``: the
    evaluation's resolved config; ``teacher_forced``: the model's teacher-forced digit metrics
    (``eval.teacher_forced``; older files: the run's ``heldout``, measured by training)."""

    benchmark: dict
    mode: str
    metrics: dict
    protocol: str = DEFAULT_PROTOCOL
    run: dict = field(default_factory=dict)
    correct_by_id: dict = field(default_factory=dict)
    distance_by_id: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    teacher_forced: dict | None = None
    schema: int = SCHEMA
    extra: dict = field(default_factory=dict)  # provenance, sampling, backend, timings: kept as written
    path: Path | None = field(default=None, compare=False)

    @classmethod
    def from_dict(cls, d: dict, path: str | Path | None = None) -> ResultRecord:
        where = path or "result record"
        try:
            d["metrics"]["accuracy"], d["metrics"]["n"], d["benchmark"]["name"], d["mode"]  # noqa: B018
        except (KeyError, TypeError) as e:
            raise BadRecord(f"{where}: not a readable result file (no {e} field); re-run its evaluation "
                            "(python -m numlearn.evaluate ...) or delete it") from None
        d = dict(d)
        # schema 1 -> 2: the protocol was implicit (strict) before the official protocol existed
        d["protocol"] = d.get("protocol") or DEFAULT_PROTOCOL
        d["run"] = dict(d.get("run") or {})
        if d["run"].get("heldout") is None and d["run"].get("run_dir"):
            # results written before the evaluator copied the held-out metrics: the run's own record
            run = Path(d["run"]["run_dir"]) / RUN_META
            if run.is_file():
                try:
                    d["run"]["heldout"] = json.loads(run.read_text()).get("heldout")
                except (OSError, json.JSONDecodeError):
                    pass
        known, extra = _split(cls, d)
        for k in ("correct_by_id", "distance_by_id", "config"):
            known[k] = known.get(k) or {}
        known["schema"] = SCHEMA
        return cls(**known, extra=extra, path=Path(path) if path else None)

    @classmethod
    def read(cls, path: str | Path) -> ResultRecord:
        return cls.from_dict(_load(Path(path), "result file (result.json)"), path)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "path")}
        if d["teacher_forced"] is None:
            del d["teacher_forced"]
        return {**self.extra, **d}

    def write(self, path: str | Path | None = None) -> None:
        """Written portable (``portable``): the paths it names are the repository's, not this machine's."""
        write_atomic(path or self.path, portable(self.to_dict()))

    def for_protocol(self, protocol: str | None) -> ResultRecord | None:
        """This result under ``protocol``: itself when it was scored that way (or ``protocol`` is
        None), else its rescored sibling ``result.<protocol>.json``; None if there is none."""
        if protocol is None or self.protocol == protocol:
            return self
        alt = self.path.with_name(f"result.{protocol}.json") if self.path else None
        return ResultRecord.read(alt) if alt is not None and alt.exists() else None

    @property
    def benchmark_name(self) -> str:
        return self.benchmark["name"]

    @property
    def row(self) -> str:
        """The table row this result stands in: the run's row name (``del_paper``), else its loss."""
        return self.run.get("loss_tag") or self.run.get("loss") or "unknown"

    @property
    def heldout(self) -> dict:
        """The teacher-forced digit metrics: the evaluator's, or (older results) the run's own."""
        return self.teacher_forced or self.run.get("heldout") or {}

    @property
    def training_config(self) -> dict:
        """The config that decides the model: the run's recipe, or (older files) the evaluation's
        composed config, which names the same sections."""
        return self.run.get("recipe") or self.config or {}

    @property
    def limit(self):
        """The evaluation's problem limit (None: every problem)."""
        return (self.config.get("eval") or {}).get("limit")

    @property
    def git_commit(self) -> str | None:
        return (self.extra.get("git") or {}).get("commit")

    def numbers(self) -> dict:
        """What the result says, without when, where and by which commit it was computed."""
        return {"metrics": self.metrics, "correct_by_id": self.correct_by_id or None,
                "distance_by_id": self.distance_by_id or None, "heldout": self.heldout or None}
