"""The committed store of result files, ``results/runs``: what the tables and the sweep are built from.

Run directories (``outputs/``: checkpoints, generations, logs) are local and large, and a sitting
that ends loses them. A run's result files (``result.json``: metrics, per-problem scores, held-out
digit metrics, resolved config, versions, git) are small, so they are published into the store under
the same relative path and committed. A table with >= 8 seeds per row can then be produced over
several sittings, and a re-run that publishes over a stored file says whether its numbers changed
(same command, same numbers).

    python -m numlearn.reporting.store publish outputs/table1_tiny/tiny/del/alpha=0.1 [--store results/runs]
    python -m numlearn.reporting.store pending experiment=table1_tiny loss=del loss.alpha=0.1 seed=0,1,2 [eval=...]

``pending`` prints the seeds (comma-separated) that lack a stored result for some benchmark and mode
of the ``eval`` config: ``make ... REUSE=1`` trains and evaluates only those.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_STORE = Path("results/runs")
DEFAULT_OUTPUTS = Path("outputs")


class StoreError(ValueError):
    pass


def _numbers(r: dict) -> dict:
    """What a result says, without when, where and by which commit it was computed."""
    return {"metrics": r.get("metrics"), "correct_by_id": r.get("correct_by_id"),
            "distance_by_id": r.get("distance_by_id"), "heldout": (r.get("run") or {}).get("heldout")}


def _read_result(path: Path) -> dict:
    try:
        r = json.loads(path.read_text())
        r["metrics"]["accuracy"], r["benchmark"]["name"], r["mode"]  # noqa: B018 - what every table reads
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise StoreError(f"{path}: not a readable result file ({type(e).__name__}: {e}); re-run its evaluation "
                         "or delete it") from None
    return r


def result_files(root: Path) -> list[Path]:
    """The evaluator's result files under ``root``: ``eval/<benchmark>/<mode>/result[.<protocol>].json``."""
    return sorted(p for p in Path(root).rglob("result*.json")
                  if p.parent.parent.parent.name == "eval" and (p.name == "result.json" or p.name.count(".") == 2))


@dataclass
class Published:
    new: list[Path] = field(default_factory=list)
    identical: list[Path] = field(default_factory=list)
    changed: list[Path] = field(default_factory=list)

    def summary(self) -> str:
        s = f"{len(self.new)} new, {len(self.identical)} identical, {len(self.changed)} changed"
        if self.changed:
            s += " -- numbers differ from the stored result: " + ", ".join(map(str, self.changed[:5])) + \
                 (" ..." if len(self.changed) > 5 else "") + " (git diff shows how)"
        return s


def publish(sources: list[str | Path], outputs: str | Path = DEFAULT_OUTPUTS,
            store: str | Path = DEFAULT_STORE) -> Published:
    """Copy every result file under ``sources`` (directories inside ``outputs``) to the same path
    relative to ``store``. A stored file is replaced (the newest evaluation wins) and counted as
    changed when its numbers differ."""
    outputs, store = Path(outputs).resolve(), Path(store)
    done = Published()
    for src in sources:
        src = Path(src).resolve()
        try:
            src.relative_to(outputs)
        except ValueError:
            raise StoreError(f"{src} is not inside the output directory {outputs}; pass --outputs") from None
        for f in result_files(src):
            new = _read_result(f)
            dest = store / f.relative_to(outputs)
            if dest.exists():
                same = _numbers(_read_result(dest)) == _numbers(new)
                (done.identical if same else done.changed).append(dest)
            else:
                done.new.append(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(".tmp")
            shutil.copyfile(f, tmp)
            tmp.replace(dest)
    return done


def _split_seeds(overrides: list[str]) -> tuple[list[str], list[int]]:
    seeds, rest = [0], []
    for o in overrides:
        if o.startswith("seed="):
            try:
                seeds = [int(s) for s in o.split("=", 1)[1].split(",") if s != ""]
            except ValueError:
                raise StoreError(f"{o!r}: seeds are integers, e.g. seed=0,1,2") from None
        else:
            rest.append(o)
    return rest, seeds


def _has_result(d: Path, protocol: str, limit) -> bool:
    for f in (d / "result.json", d / f"result.{protocol}.json"):
        if f.exists():
            r = _read_result(f)
            if r.get("protocol", "strict") == protocol and \
                    ((r.get("config") or {}).get("eval") or {}).get("limit") == limit:
                return True
    return False


def pending(overrides: list[str], store: str | Path = DEFAULT_STORE) -> list[int]:
    """The seeds of ``overrides`` (``seed=0,1,2``) whose stored results lack a benchmark or mode of
    their ``eval`` config, or hold it under another protocol or problem limit."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.cli import conf_dir
    from numlearn.evaluation.spec import BenchmarkSpec

    rest, seeds = _split_seeds(overrides)
    store = Path(store)
    todo = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for seed in seeds:
            cfg = compose("evaluate", overrides=[*rest, f"seed={seed}"])
            outputs = Path(str(cfg.paths.output_dir)).resolve()
            try:
                rel = Path(str(cfg.eval_dir)).resolve().relative_to(outputs)
            except ValueError:
                raise StoreError(f"eval_dir {cfg.eval_dir} is outside paths.output_dir {outputs}: the store mirrors "
                                 "the output directory, so leave eval_dir at its default") from None
            ecfg = cfg.eval
            limit = OmegaConf.to_container(ecfg).get("limit")
            protocol = str(ecfg.get("protocol", "strict"))
            want = [(name, mode) for name, bcfg in ecfg.benchmarks.items()
                    for mode in BenchmarkSpec.from_config(bcfg).modes(ecfg.modes)]
            if not all(_has_result(store / rel / name / mode, protocol, limit) for name, mode in want):
                todo.append(seed)
    return todo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="numlearn.reporting.store", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("publish", help="copy the result files under run directories into the store")
    p.add_argument("sources", nargs="+", help="run roots or run directories inside --outputs")
    p.add_argument("--outputs", default=str(DEFAULT_OUTPUTS))
    p.add_argument("--store", default=str(DEFAULT_STORE))
    q = sub.add_parser("pending", help="the seeds without stored results, from Hydra overrides")
    q.add_argument("overrides", nargs="*")
    q.add_argument("--store", default=str(DEFAULT_STORE))
    a = ap.parse_args(argv)
    try:
        if a.cmd == "publish":
            missing = [s for s in a.sources if not Path(s).exists()]
            if missing:
                raise StoreError(f"{missing[0]} does not exist: train and evaluate the run first")
            print(f"[store] {a.store}: " + publish(a.sources, a.outputs, a.store).summary(), file=sys.stderr)
        else:
            print(",".join(map(str, pending(a.overrides, a.store))))
    except StoreError as e:
        print(f"numlearn.reporting.store: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
