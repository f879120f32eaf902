"""Where runs live, from the configs themselves: ``python -m numlearn.rundirs experiment=table1_tiny
loss=mle,ntl,dist2,del`` prints each loss's run root at its configured weight
(``<output_dir>/<experiment>/<model>/<loss>/alpha=<alpha>``), so no Makefile or script repeats a
loss weight that ``conf/loss`` and ``conf/experiment`` already hold; ``seed=0,1`` prints the seeds'
run directories, ``paths.output_dir=results/runs`` their places in the result store."""

from __future__ import annotations

import sys
from pathlib import Path


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
            seeds = [s for s in o.split("=", 1)[1].split(",") if s]
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


def run_is_complete(run_dir: str | Path) -> bool:
    """A training run finished: its ``final/`` model exists and ``run.json`` says complete."""
    import json

    d = Path(run_dir)
    meta = d / RUN_META
    return (d / FINAL / "config.json").exists() and meta.exists() and \
        json.loads(meta.read_text()).get("status") == "complete"


def run_meta_of_model(model_path: str | Path) -> dict | None:
    """The ``run.json`` of the training run whose ``final/`` is ``model_path``; None for a model that
    no numlearn run produced (a hub name, another directory)."""
    import json

    p = Path(model_path)
    if p.name != FINAL or not (p.parent / RUN_META).exists():
        return None
    return json.loads((p.parent / RUN_META).read_text())


def main(argv: list[str] | None = None) -> None:
    for p in configured_run_roots(list(sys.argv[1:] if argv is None else argv)):
        print(p)


if __name__ == "__main__":
    main()
