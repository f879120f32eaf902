"""Where runs live, from the configs themselves: ``python -m numlearn.rundirs experiment=table1_tiny
loss=mle,ntl,dist2,del`` prints each loss's run root at its configured weight
(``<output_dir>/<experiment>/<model>/<loss>/alpha=<alpha>``), so no Makefile or script repeats a
loss weight that ``conf/loss`` and ``conf/experiment`` already hold; ``seed=0,1`` prints the seeds'
run directories, ``paths.output_dir=results/runs`` their places in the result store.

``python -m numlearn.rundirs --pending [--store results/runs] experiment=table1_tiny loss=del
loss.alpha=0.1 seed=0,1,2 [eval=...]`` prints the seeds (comma-separated) whose stored results lack a
benchmark or mode of the ``eval`` config, or hold one under another protocol, problem limit or
training recipe: ``make ... REUSE=1`` trains and evaluates only those."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

# train.* keys that change what a run logs or saves, never the weights it ends with
BOOKKEEPING_TRAIN_KEYS = frozenset({"logging_steps", "save_steps", "save_total_limit", "disable_tqdm",
                                    "count_input_tokens"})


def training_recipe(cfg) -> dict:
    """What decides the model a run ends with: the resolved ``model``, ``data``, ``train`` (less
    bookkeeping) and ``loss`` sections and the seed. ``cfg``: a composed config or the ``config``
    dict a result file holds."""
    from omegaconf import DictConfig, OmegaConf

    c = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    train = {k: v for k, v in (c.get("train") or {}).items() if k not in BOOKKEEPING_TRAIN_KEYS}
    return {"model": c.get("model"), "data": c.get("data"), "train": train, "loss": c.get("loss"),
            "seed": c.get("seed")}


def recipe_sha(recipe: dict) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]


def recipe_differences(stored: dict, current: dict, prefix: str = "") -> list[str]:
    """``key: stored -> current`` for each leaf that differs. A key one side lacks while the other
    holds null or false is the same recipe: an option added later whose default leaves the old
    computation as it was."""
    out = []
    for k in sorted(set(stored) | set(current)):
        a, b = stored.get(k), current.get(k)
        name = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += recipe_differences(a, b, name + ".")
        elif (k not in stored and b in (None, False)) or (k not in current and a in (None, False)):
            continue
        elif a != b:
            out.append(f"{name}: {a!r} -> {b!r}")
    return out


def configured_run_roots(overrides: list[str]) -> list[Path]:
    """One run root (seed level stripped) per value of a comma-separated ``loss=`` override; with a
    ``seed=`` override (``seed=0,1,2``), the run directories of those seeds instead."""
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir

    losses, seeds = ["mle"], None
    rest = []
    for o in overrides:
        if o.startswith("loss="):
            losses = o.split("=", 1)[1].split(",")
        elif o.startswith("seed="):
            seeds = seed_list(o)
        else:
            rest.append(o)
    out = []
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for loss in losses:
            for seed in seeds or [None]:
                cfg = compose("config", overrides=[*rest, f"loss={loss}", *([f"seed={seed}"] if seeds else [])])
                out.append(Path(cfg.run_dir) if seeds else Path(cfg.run_dir).parent)
    return out


RUN_META = "run.json"
FINAL = "final"


def damaged_weights(model_dir: str | Path) -> list[str]:
    """The ``*.safetensors`` files of ``model_dir`` that are not whole (cut short by a full disk or a
    kill mid-copy): a header that does not parse, or a size other than 8 + header + the last tensor's
    end. Reads the headers only; an empty list when every file is whole (or there are none)."""
    import json
    import struct

    bad = []
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            size = f.stat().st_size
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > size - 8:
                    raise ValueError("header longer than the file")
                header = json.loads(fh.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
            if size != 8 + n + end:
                raise ValueError(f"{size} bytes, the header describes {8 + n + end}")
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            bad.append(f"{f.name} ({e})")
    return bad


def run_is_complete(run_dir: str | Path) -> bool:
    """A training run finished: its ``final/`` model exists, its weights are whole, and ``run.json``
    says complete."""
    import json

    d = Path(run_dir)
    meta = d / RUN_META
    return (d / FINAL / "config.json").exists() and meta.exists() and \
        json.loads(meta.read_text()).get("status") == "complete" and not damaged_weights(d / FINAL)


def run_meta_of_model(model_path: str | Path) -> dict | None:
    """The ``run.json`` of the training run whose ``final/`` is ``model_path``; None for a model that
    no numlearn run produced (a hub name, another directory)."""
    import json

    p = Path(model_path)
    if p.name != FINAL or not (p.parent / RUN_META).exists():
        return None
    return json.loads((p.parent / RUN_META).read_text())


def seed_list(override: str) -> list[int]:
    """The seeds of a ``seed=0,1,2`` override. An empty list is an error, not "every seed": a run
    root without its seed level would stand for all the seeds stored under it."""
    try:
        seeds = [int(s) for s in override.split("=", 1)[1].split(",") if s != ""]
    except ValueError:
        raise ValueError(f"{override!r}: seeds are integers, e.g. seed=0,1,2") from None
    if not seeds:
        raise ValueError(f"{override!r} names no seed: give at least one, e.g. seed=0,1,2")
    return seeds


def _split_seeds(overrides: list[str]) -> tuple[list[str], list[int]]:
    seeds, rest = [0], []
    for o in overrides:
        if o.startswith("seed="):
            seeds = seed_list(o)
        else:
            rest.append(o)
    return rest, seeds


def stored_result_problem(d: Path, protocol: str, limit, recipe: dict) -> str | None:
    """Why the store's result in ``d`` (``.../eval/<benchmark>/<mode>``) cannot stand for this run;
    None when it can."""
    from numlearn.reporting.store import read_result

    found = [f for f in (d / "result.json", d / f"result.{protocol}.json") if f.exists()]
    if not found:
        return "no result"
    why = []
    for f in found:
        r = read_result(f)
        if r.get("protocol", "strict") != protocol:
            why.append(f"protocol {r.get('protocol', 'strict')}")
            continue
        if ((r.get("config") or {}).get("eval") or {}).get("limit") != limit:
            why.append(f"problem limit {((r.get('config') or {}).get('eval') or {}).get('limit')}")
            continue
        # the recipe the model was trained with (run.json, through the evaluator); older result
        # files have only the evaluation's composed config, which names the same sections
        stored = training_recipe((r.get("run") or {}).get("recipe") or r.get("config") or {})
        diff = recipe_differences(stored, recipe)
        if diff:
            why.append("trained with another recipe (" + "; ".join(diff[:4]) + (" ..." if len(diff) > 4 else "") + ")")
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
                raise ValueError(f"eval_dir {cfg.eval_dir} is outside paths.output_dir {outputs}: the store mirrors "
                                 "the output directory, so leave eval_dir at its default") from None
            ecfg = cfg.eval
            limit = OmegaConf.to_container(ecfg).get("limit")
            protocol = str(ecfg.get("protocol", "strict"))
            recipe = training_recipe(cfg)
            problems = {f"{name}/{mode}": stored_result_problem(store / rel / name / mode, protocol, limit, recipe)
                        for name, bcfg in ecfg.benchmarks.items()
                        for mode in BenchmarkSpec.from_config(bcfg).modes(ecfg.modes)}
            bad = {k: v for k, v in problems.items() if v is not None}
            if bad:
                todo.append(seed)
                if report:
                    report(seed, "; ".join(f"{k}: {v}" for k, v in bad.items()))
    return todo


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "--pending":
        try:
            roots = configured_run_roots(argv)
        except ValueError as e:
            print(f"numlearn.rundirs: error: {e}", file=sys.stderr)
            return 2
        for p in roots:
            print(p)
        return 0
    ap = argparse.ArgumentParser(prog="numlearn.rundirs --pending",
                                 description="the seeds without usable stored results, from Hydra overrides")
    ap.add_argument("--store", default="results/runs")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv[1:])
    try:
        seeds = pending_seeds(a.overrides, a.store,
                              report=lambda seed, why: print(f"[store] seed={seed}: {why}", file=sys.stderr))
    except ValueError as e:  # the store's StoreError is one
        print(f"numlearn.rundirs: error: {e}", file=sys.stderr)
        return 2
    print(",".join(map(str, seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
