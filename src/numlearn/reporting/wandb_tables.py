"""Push the aggregated tables to W&B (project numlearn, job type "aggregate")."""

from __future__ import annotations

from pathlib import Path


def log_tables(out_dir: str | Path, project: str = "numlearn") -> None:
    import pandas as pd
    import wandb

    from numlearn.training.wandb_logger import wandb_mode

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
