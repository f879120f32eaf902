"""The DEL authors' released checkpoints, evaluated as the paper did (issue 42): ``python -m numlearn.pipeline
released [--models qwen2.5-1.5b,...] [--with-base]``.

The study is data (``conf/study/released.yaml``: each checkpoint's hub id, its base model, the preset whose
``eval=paper`` it is evaluated with, the mACC the authors report and the paper's MLE row where there is
one). Each (model, role) -- ``released`` the authors' fine-tune, ``base`` the model it started from -- is one
evaluation job (``python -m numlearn.evaluate experiment=<preset> model_path=<hub id>``: vLLM, the official
protocol, the seven benchmarks), published into the store under ``released/<model>/<role>/``; the table
(``table``) is built from the store alone and puts our mACC beside the authors' reported one.

``hub_map``: hub id -> local directory, for checkpoints already downloaded (and for the tests' stand-ins).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

STUDY = "released"
ROLES = ("released", "base")


@dataclass(frozen=True)
class Checkpoint:
    name: str
    hub: str
    base: str
    experiment: str
    reported_macc: float
    paper_mle_macc: float | None
    params_b: float

    def model(self, role: str) -> str:
        return self.hub if role == "released" else self.base


def load_study(path: str | Path) -> dict[str, Checkpoint]:
    """The checkpoints of ``conf/study/released.yaml``; a misspelt key is refused in one line."""
    from dataclasses import fields

    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(path))
    allowed = {f.name for f in fields(Checkpoint)} - {"name"}
    out = {}
    for name, spec in (raw.get("models") or {}).items():
        unknown = set(spec) - allowed
        if unknown:
            raise ValueError(f"{path}: models.{name}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        out[name] = Checkpoint(name=name, **spec)
    return out


def choose(study: dict[str, Checkpoint], models: str | None) -> list[Checkpoint]:
    names = [m for m in (models or ",".join(study)).split(",") if m]
    unknown = [m for m in names if m not in study]
    if unknown:
        raise ValueError(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(study)}")
    return [study[m] for m in names]


def run_dir(outputs: Path, ck: Checkpoint, role: str) -> Path:
    return Path(outputs) / STUDY / ck.name / role


def evaluate_steps(ck: Checkpoint, role: str, *, outputs: Path, store: Path, hub_map: dict[str, str],
                   overrides: list[str], python: str = sys.executable) -> list[tuple[str, list[str]]]:
    """The steps of one (checkpoint, role) job: evaluate with the preset's ``eval=paper``, then publish."""
    model = ck.model(role)
    path = hub_map.get(model, model)
    rd = run_dir(outputs, ck, role)
    ev = [python, "-m", "numlearn.evaluate", f"experiment={ck.experiment}", f"model_path={path}",
          f"run_dir={rd}", f"eval_dir={rd}/eval", f"paths.output_dir={outputs}", *overrides]
    pub = [python, "-m", "numlearn.reporting.store", "publish", str(rd), "--outputs", str(outputs), "--store", str(store)]
    return [("evaluate", ev), ("publish", pub)]


def stored_results(store: Path, ck: Checkpoint, role: str) -> dict[str, dict]:
    """benchmark -> its stored result (the paper mode's, or the only mode's) for one (checkpoint, role)."""
    from numlearn.records import ResultRecord
    from numlearn.reporting.store import result_files

    out = {}
    root = Path(store) / STUDY / ck.name / role
    if not root.is_dir():
        return out
    for f in result_files(root):
        if f.name != "result.json":
            continue
        r = ResultRecord.read(f)
        bench = r.benchmark.get("name") if isinstance(r.benchmark, dict) else str(r.benchmark)
        if bench not in out or r.mode == "paper":
            out[bench] = {"accuracy": 100.0 * float(r.metrics["accuracy"]), "n": int(r.metrics["n"]), "mode": r.mode,
                          "protocol": r.protocol, "model_path": r.extra.get("model_path")}
    return out


def table(study: list[Checkpoint], store: Path, out: Path, command: str, benchmarks: tuple[str, ...]) -> str:
    """``<out>/table.md`` (and ``table.json``) from the store: per checkpoint and role, each benchmark's
    accuracy, our mACC over the benchmarks present, and the authors' reported mACC beside it."""
    import json

    from numlearn.reporting.aggregate import header

    rows, data = [], {}
    for ck in study:
        for role in ROLES:
            res = stored_results(store, ck, role)
            if not res:
                continue
            accs = [res[b]["accuracy"] for b in benchmarks if b in res]
            macc = sum(accs) / len(accs) if accs else None
            complete = len(accs) == len(benchmarks)
            data[f"{ck.name}/{role}"] = {"model": ck.model(role), "results": res, "macc": macc,
                                         "benchmarks_present": len(accs)}
            reported = f"{ck.reported_macc:.1f}" if role == "released" else (
                f"{ck.paper_mle_macc:.1f} (paper's MLE row)" if ck.paper_mle_macc is not None else "--")
            cells = [f"{res[b]['accuracy']:.1f}" if b in res else "--" for b in benchmarks]
            ours = "--" if macc is None else f"{macc:.1f}" + ("" if complete else f" ({len(accs)} of {len(benchmarks)})")
            protocol = "/".join(sorted({r["protocol"] for r in res.values()}))
            n = "/".join(str(res[b]["n"]) for b in benchmarks if b in res)
            rows.append(f"| {ck.name} | {role}: `{ck.model(role)}` | {' | '.join(cells)} | {ours} | {reported} "
                        f"| {protocol} | {n} |")
    lines = [header(command, "numlearn.pipeline released", out), "",
             "Accuracy (%) per benchmark, as the paper evaluates (`eval=paper`); mACC = their mean. The last "
             "columns quote the authors: the mACC their README reports for the released checkpoint, and the "
             "paper's Table 1 MLE row for the base where it has one -- theirs, not ours.", "",
             f"| checkpoint | model | {' | '.join(benchmarks)} | mACC (ours) | mACC (authors) | protocol | n |",
             "|---|---|" + "---|" * len(benchmarks) + "---|---|---|---|", *rows]
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    (out / "table.json").write_text(json.dumps(data, indent=1) + "\n")
    return text
