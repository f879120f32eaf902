"""The committed store of result files, ``results/runs``: what the tables and the sweep are built from.

Run directories (``outputs/``: checkpoints, generations, logs) are local and large, and a sitting
that ends loses them. A run's result files (``result.json``: metrics, per-problem scores, held-out
digit metrics, resolved config, versions, git) are small, so they are published into the store under
the same relative path and committed. A table with >= 8 seeds per row can then be produced over
several sittings, and a re-run that publishes over a stored file says whether its numbers changed
(same command, same numbers).

    python -m numlearn.reporting.store publish outputs/table1_tiny/tiny/del/alpha=0.1 [--store results/runs]

Which seeds the store still lacks is a question about configs, so the orchestrator asks it:
``python -m numlearn.pipeline pending ...`` (``make ... REUSE=1`` trains and evaluates only those).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from numlearn.records import BadRecord, ResultRecord, is_result_file

DEFAULT_STORE = Path("results/runs")
DEFAULT_OUTPUTS = Path("outputs")


class StoreError(ValueError):
    pass


def read_result(path: Path) -> ResultRecord:
    try:
        return ResultRecord.read(path)
    except BadRecord as e:
        raise StoreError(str(e)) from None


def result_files(root: Path) -> list[Path]:
    """The evaluator's result files under ``root``: ``eval/<benchmark>/<mode>/result[.<protocol>].json``."""
    return sorted(p for p in Path(root).rglob("result*.json") if is_result_file(p))


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
            new = read_result(f)
            dest = store / f.relative_to(outputs)
            if dest.exists():
                same = read_result(dest).numbers() == new.numbers()
                (done.identical if same else done.changed).append(dest)
            else:
                done.new.append(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(".tmp")
            shutil.copyfile(f, tmp)
            tmp.replace(dest)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="numlearn.reporting.store", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("publish", help="copy the result files under run directories into the store")
    p.add_argument("sources", nargs="+", help="run roots or run directories inside --outputs")
    p.add_argument("--outputs", default=str(DEFAULT_OUTPUTS))
    p.add_argument("--store", default=str(DEFAULT_STORE))
    a = ap.parse_args(argv)
    try:
        from numlearn.provenance import check_output_dir

        check_output_dir(a.store, "--store")
        missing = [s for s in a.sources if not Path(s).exists()]
        if missing:
            raise StoreError(f"{missing[0]} does not exist: train and evaluate the run first")
        print(f"[store] {a.store}: " + publish(a.sources, a.outputs, a.store).summary(), file=sys.stderr)
    except (StoreError, OSError, ValueError) as e:  # a file named as the store, a full disk: one line
        print(f"numlearn.reporting.store: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
