"""W&B: project ``numlearn``, group = experiment, run name from the overrides; offline unless an
API key is configured (never a prompt, never a 90 s retry loop without network)."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf


def wandb_mode(requested: str | None) -> str:
    if requested:
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (Path.home() / ".netrc").exists() and \
        "api.wandb.ai" in (Path.home() / ".netrc").read_text(errors="ignore")
    return "online" if has_key else "offline"


def init_wandb(cfg, run_dir: Path):
    import wandb

    lcfg = cfg.logger
    mode = wandb_mode(lcfg.get("mode"))
    os.environ["WANDB_MODE"] = mode
    os.environ.setdefault("WANDB_SILENT", "true")
    name = cfg.get("run_name") or f"{cfg.model.name}-{cfg.loss.name}-a{cfg.loss.get('alpha')}-s{cfg.seed}"
    return wandb.init(
        project=lcfg.get("project", "numlearn"), entity=lcfg.get("entity"), group=str(cfg.experiment_name),
        name=name, dir=str(run_dir), mode=mode, tags=list(lcfg.get("tags") or []),
        config=OmegaConf.to_container(cfg, resolve=True), reinit="finish_previous",
    )
