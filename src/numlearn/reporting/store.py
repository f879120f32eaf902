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
from numlearn.rundirs import recipe_differences, training_recipe

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


def differences(stored: ResultRecord, new: ResultRecord) -> list[str]:
    """The reported numbers in which ``new`` differs from ``stored``, one phrase each; empty: the same
    result. Only what both files report is compared: a field one of them lacks (added to the result
    format since the other was written, e.g. ``metrics.n_digit_problems`` or ``heldout.source``) is no
    difference, so a file from an older commit reproduced exactly by a newer one reads as identical."""
    out = []
    for section in ("metrics", "heldout"):
        a, b = _leaves(getattr(stored, section) or {}), _leaves(getattr(new, section) or {})
        for k in sorted(set(a) & set(b)):
            if a[k] != b[k]:
                out.append(f"{section}.{k} {_short(a[k])} -> {_short(b[k])}")
    for section in ("correct_by_id", "distance_by_id"):
        a, b = getattr(stored, section) or {}, getattr(new, section) or {}
        if a and b and a != b:
            n = sum(a.get(i) != b.get(i) for i in set(a) | set(b))
            out.append(f"{section}: {n} of {len(set(a) | set(b))} problems differ")
    return out


def _leaves(d: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: nested metrics (per-place digit accuracy) compared leaf by leaf."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _short(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else (str(v) if not isinstance(v, dict) else "{...}")


@dataclass
class Comparison:
    """A user's result files against the committed store, file by file (``compare``)."""

    identical: list[Path] = field(default_factory=list)
    differ: dict[Path, list[str]] = field(default_factory=dict)
    absent: list[Path] = field(default_factory=list)  # no committed file at that path
    versions: dict[Path, str] = field(default_factory=dict)  # for a differing file: recorded versions apart
    recipes: dict[Path, list[str]] = field(default_factory=dict)  # ... and training recipes apart (a shrunk run)
    machines: dict[Path, str] = field(default_factory=dict)  # ... and the machines their runs were trained on

    @property
    def n(self) -> int:
        return len(self.identical) + len(self.differ) + len(self.absent)

    def machine_explains(self) -> bool:
        """Every differing file was trained under the same recipe and package versions on a machine the
        records set apart (or that the store did not record)."""
        return bool(self.differ) and all(not self.recipes.get(p) and self.versions.get(p) == "the same package versions"
                                         and self.machines.get(p) for p in self.differ)

    def lines(self, label: str, against: Path) -> list[str]:
        """Each differing file (what differs, the recorded versions that may explain it), then one line:
        ``label: 28/28 result files identical to the committed store (results/runs)``."""
        out = [f"  {p}: {'; '.join(d[:4])}{' ...' if len(d) > 4 else ''}"
               + (f" [trained under another recipe: {'; '.join(self.recipes[p][:3])}]" if self.recipes.get(p) else
                  f" [recorded versions: {self.versions[p]}]" if self.versions.get(p) else "")
               + (f" [machines: {self.machines[p]}]" if self.machines.get(p) and not self.recipes.get(p) else "")
               for p, d in self.differ.items()]
        out += [f"  {p}: not in the committed store" for p in self.absent]
        head = f"{label}: {len(self.identical)}/{self.n} result files identical to the committed store ({against})"
        if self.differ:
            head += f"; {len(self.differ)} differ (listed above)"
            if self.machine_explains():
                head += ("; same recipe and package versions, trained on another machine: CPU float kernels differ "
                         "in the last bits, and training amplifies them (docs/development.md, 'Seed 0')")
        if self.absent:
            head += f"; {len(self.absent)} not in it"
        return [*out, head]


def _versions_apart(a: ResultRecord, b: ResultRecord) -> str:
    pa, pb = a.extra.get("packages") or {}, b.extra.get("packages") or {}
    apart = [f"{k} {pa.get(k)} (store) vs {pb.get(k)} (this run)" for k in sorted(set(pa) | set(pb))
             if pa.get(k) != pb.get(k)]
    return ", ".join(apart) if apart else "the same package versions"


def machine_of(r: ResultRecord) -> dict:
    """Where the run was trained (``run.train_environment``), or, for a file from before that was recorded,
    where it was evaluated (``environment``): platform, CPU, torch's CPU capability, threads."""
    env = (r.run or {}).get("train_environment") or {}
    if not env:
        env = {k: v for k, v in (r.extra.get("environment") or {}).items()
               if k in ("platform", "cpu", "cpu_capability", "device")}
    return env


def machines_apart(a: ResultRecord, b: ResultRecord) -> str:
    """The machine facts two results' runs differ in (``""``: none recorded apart). A fact only one side
    recorded is named as unrecorded, not as equal."""
    ma, mb = machine_of(a), machine_of(b)
    out = []
    for k in ("cpu", "cpu_capability", "platform"):
        if k in ma and k in mb and ma[k] != mb[k]:
            out.append(f"{k} {ma[k]} (store) vs {mb[k]} (this run)")
        elif k in mb and k not in ma and k != "platform":
            out.append(f"{k} not recorded by the store (this run: {mb[k]})")
    return "; ".join(out)


def _common(a: dict, b: dict) -> tuple[dict, dict]:
    """``a`` and ``b`` restricted (recursively) to the keys both hold."""
    keys = set(a) & set(b)
    out_a, out_b = {}, {}
    for k in keys:
        if isinstance(a[k], dict) and isinstance(b[k], dict):
            out_a[k], out_b[k] = _common(a[k], b[k])
        else:
            out_a[k], out_b[k] = a[k], b[k]
    return out_a, out_b


def compare(files: list[Path], store: str | Path, committed: str | Path) -> Comparison:
    """``files`` (result files under ``store``) against the files at the same relative paths under
    ``committed``: identical, differing (``differences``) or absent. Nothing is written."""
    store, committed = Path(store), Path(committed)
    done = Comparison()
    for f in sorted(files):
        rel = Path(f).relative_to(store)
        ref = committed / rel
        if not ref.is_file():
            done.absent.append(rel)
            continue
        old, new = read_result(ref), read_result(Path(f))
        if diff := differences(old, new):
            done.differ[rel] = diff
            done.versions[rel] = _versions_apart(old, new)
            if machine := machines_apart(old, new):
                done.machines[rel] = machine
            if old.run.get("recipe") and new.run.get("recipe"):
                # keys both recipes record: a key one side lacks is the record's format changing (e.g. the
                # held-out records moved from data.heldout to eval.teacher_forced), not another training
                diffs = recipe_differences(*_common(old.run["recipe"], new.run["recipe"]))
                # values set on both sides first (train.max_steps: 1000 -> 40), keys one side lacks after
                done.recipes[rel] = sorted(diffs, key=lambda d: "None" in d)
        else:
            done.identical.append(rel)
    return done


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


# what a study's row varies on purpose against its preset: the loss and its options, the seed, and MLE's tuned
# learning rate (conf/study/mle_lr.yaml); any other difference is a shortened or changed recipe
ROW_KEYS = ("loss", "seed", "train.learning_rate")


def is_committed_store(store: str | Path) -> bool:
    """``store`` is a checkout's committed store: ``<repository>/results/runs``."""
    s = Path(store).resolve()
    return s.name == "runs" and s.parent.name == "results" and (s.parent.parent / ".git").exists()


def committed_store_problem(result: ResultRecord, _cache: dict | None = None) -> str | None:
    """Why ``result`` may not enter the committed store (issue 66 item 3): an evaluation on a problem subset,
    or a training recipe that differs from its preset's in more than a row varies (``ROW_KEYS``: a 20-step
    rehearsal, a shrunken data set); None when it may. A model evaluated by path has no recipe of ours."""
    exp, tc = result.run.get("experiment"), result.training_config
    if not exp or not tc or not isinstance(tc, dict):
        return None
    found = _preset_recipe(str(exp), tc, {} if _cache is None else _cache)
    if found is None:  # an experiment no preset of this checkout names (an older study's): nothing to compare
        return None
    preset, limit = found
    if result.limit is not None and result.limit != limit and \
            result.limit not in _declared_limits(str(exp), result.benchmark_name, _cache if _cache is not None else {}):
        return (f"it was evaluated on {result.limit} problems per benchmark, where its preset evaluates "
                + ("every problem" if limit is None else str(limit))
                + f" and no conf/eval file that holds {result.benchmark_name} evaluates {result.limit}")
    diff = [d for d in recipe_differences(preset, training_recipe(tc)) if not d.startswith(ROW_KEYS)]
    if diff:
        return (f"it was trained with a recipe its preset experiment={exp} does not have ("
                + "; ".join(diff[:3]) + (" ..." if len(diff) > 3 else "") + ")")
    return None


def _declared_limits(experiment: str, benchmark: str, cache: dict) -> set:
    """The problem limits a declared evaluation gives ``benchmark`` under ``experiment``: every ``conf/eval`` file
    that holds it, composed on the preset (a study's selection split, ``eval=qwen_coder_select``: its first 40
    problems). A subset no file declares -- an ``eval.limit=`` on the command line -- is in none."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from numlearn.cli import conf_dir

    key = ("declared", experiment)
    if key not in cache:
        limits: dict[str, set] = {}
        with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
            for f in sorted((Path(conf_dir()) / "eval").glob("*.yaml")):
                if f.stem.startswith("_"):
                    continue
                try:
                    ev = compose("evaluate", overrides=[f"experiment={experiment}", f"eval={f.stem}"]).eval
                except (HydraException, OmegaConfBaseException):
                    continue
                for name in ev.benchmarks or {}:
                    limits.setdefault(str(name), set()).add(ev.get("limit"))
        cache[key] = limits
    return cache[key].get(benchmark, set())


def _preset_recipe(experiment: str, tc: dict, cache: dict) -> tuple[dict, object] | None:
    """The training recipe and the evaluation's problem limit the preset composes for the result's model, loss
    and seed (None if it does not compose)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from numlearn.cli import conf_dir

    loss, model = (tc.get("loss") or {}).get("name"), (tc.get("model") or {}).get("name")
    key = (experiment, loss, model, tc.get("seed"))
    if key not in cache:
        base = [f"experiment={experiment}", *([f"loss={loss}"] if loss else []), f"seed={tc.get('seed') or 0}"]
        cache[key] = None
        with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
            for overrides in ([*base, f"model={model}"], base) if model else (base,):
                try:
                    cfg = compose("evaluate", overrides=overrides)
                    cache[key] = (training_recipe(cfg), cfg.eval.get("limit"))
                    break
                except (HydraException, OmegaConfBaseException):
                    continue
    return cache[key]


def publish(sources: list[str | Path], outputs: str | Path = DEFAULT_OUTPUTS,
            store: str | Path = DEFAULT_STORE, any_recipe: bool = False) -> Published:
    """Copy every result file under ``sources`` (directories inside ``outputs``) to the same path
    relative to ``store``. A stored file is replaced (the newest evaluation wins) and counted as
    changed when its numbers differ. Into a committed store (``is_committed_store``) a shortened run is
    refused before anything is copied (``committed_store_problem``), unless ``any_recipe``."""
    outputs, store = Path(outputs).resolve(), Path(store)
    done = Published()
    checked = not any_recipe and is_committed_store(store)
    cache: dict = {}
    for src in sources:
        src = Path(src).resolve()
        try:
            src.relative_to(outputs)
        except ValueError:
            raise StoreError(f"{src} is not inside the output directory {outputs}; pass --outputs") from None
        for f in result_files(src) if checked else ():
            if why := committed_store_problem(read_result(f), cache):
                raise StoreError(f"{f.relative_to(outputs)} is not published into the committed store {store}: {why}; "
                                 "publish it into a store of your own (--store outputs/store), or pass --any-recipe "
                                 "where a recipe of its own is meant")
    for src in sources:
        src = Path(src).resolve()
        for f in result_files(src):
            new = read_result(f)
            dest = store / f.relative_to(outputs)
            if dest.exists():
                same = not differences(read_result(dest), new)
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
    p.add_argument("--any-recipe", action="store_true",
                   help="into the committed store: accept a recipe or a problem subset its preset does not have")
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    try:
        from numlearn.provenance import check_output_dir

        check_output_dir(a.store, "--store")
        missing = [s for s in a.sources if not Path(s).exists()]
        if missing:
            raise StoreError(f"{missing[0]} does not exist: train and evaluate the run first")
        print(f"[store] {a.store}: " + publish(a.sources, a.outputs, a.store, a.any_recipe).summary(), file=sys.stderr)
    except (StoreError, OSError, ValueError) as e:  # a file named as the store, a full disk: one line
        print(f"numlearn.reporting.store: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
