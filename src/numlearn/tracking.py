"""Weights & Biases, in one place: training runs and aggregated tables.

Project ``numlearn``; a training run's group is its experiment and its name comes from
model/loss/alpha/seed; tables are logged by an ``aggregate`` job. Offline unless an API key is
configured (never a prompt, never a 90 s retry loop without network). ``wandb`` is imported only
when a function here is called.
"""

from __future__ import annotations

import os
from pathlib import Path


def wandb_mode(requested: str | None) -> str:
    if requested:
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    netrc = Path.home() / ".netrc"
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="ignore"))
    return "online" if has_key else "offline"


def init_run(cfg, run_dir: Path):
    """Start the W&B run of a training run (``logger=wandb``)."""
    import wandb
    from omegaconf import OmegaConf

    lcfg = cfg.logger
    mode = wandb_mode(lcfg.mode)
    os.environ["WANDB_MODE"] = mode
    os.environ.setdefault("WANDB_SILENT", "true")
    name = cfg.get("run_name") or f"{cfg.model.name}-{cfg.loss.name}-a{cfg.loss.get('alpha')}-s{cfg.seed}"
    return wandb.init(
        project=lcfg.project, entity=lcfg.entity, group=str(cfg.experiment_name),
        name=name, dir=str(run_dir), mode=mode, tags=list(lcfg.tags or []),
        config=OmegaConf.to_container(cfg, resolve=True), reinit="finish_previous",
    )


def run_ref(run) -> dict:
    """What an evaluation needs to log into a training's W&B run later (recorded in run.json as ``wandb``)."""
    return {"id": run.id, "project": run.project, "entity": getattr(run, "entity", None), "group": run.group,
            "name": run.name, "mode": os.environ.get("WANDB_MODE", "offline")}


def log_evaluation(ref: dict, run_dir: Path, metrics: dict[str, float]) -> None:
    """Log an evaluation's metrics into the training run ``ref`` (``run_ref``), resumed by its id: the
    evaluation's numbers beside the training curves in one W&B run. Keys as given (``eval/<bench>/<mode>/...``)."""
    import wandb

    mode = wandb_mode(ref.get("mode"))
    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(project=ref.get("project") or "numlearn", entity=ref.get("entity"), id=ref["id"],
                     resume="allow", group=ref.get("group"), name=ref.get("name"), dir=str(run_dir), mode=mode,
                     reinit="finish_previous")
    try:
        run.log(dict(metrics))
        for k, v in metrics.items():
            run.summary[k] = v
    finally:
        wandb.finish()


def finish_run() -> None:
    import wandb

    wandb.finish()


def log_tables(out_dir: str | Path, project: str = "numlearn") -> None:
    """Push the aggregated tables (``table1``, ``digits``, ``vs_mle`` CSVs) of ``out_dir``."""
    import pandas as pd
    import wandb

    out = Path(out_dir)
    run = wandb.init(project=project, job_type="aggregate", name=f"aggregate-{out.name}", dir=str(out),
                     mode=wandb_mode(None))
    try:
        for name in ("table1", "digits", "vs_mle"):
            f = out / f"{name}.csv"
            if f.exists():
                run.log({name: wandb.Table(dataframe=pd.read_csv(f))})
    finally:
        wandb.finish()
