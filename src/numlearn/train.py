"""Hydra entry point: ``python -m numlearn.train [group=choice ...] [key=value ...]``.

Examples::

    python -m numlearn.train                                  # tiny model, synthetic data, MLE
    python -m numlearn.train loss=del loss.alpha=0.3
    python -m numlearn.train -m loss=del loss.alpha=0.01,0.1,0.32,1.28,2.56   # sweep, one run dir each
    python -m numlearn.train experiment=table1_qwen2.5-1.5b loss=del dry_run=true   # plan only, no weights
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from numlearn.cli import (
    conf_dir,
    fail,
    io_failure,
    run_entry_point,
)


@hydra.main(version_base="1.3", config_path=conf_dir(), config_name="config")
def _main(cfg: DictConfig) -> None:
    from numlearn.data.sources import DataError
    from numlearn.losses import TokenizerDigitError
    from numlearn.rundirs import RunDirBusy
    from numlearn.training.launch import export_submitit_distributed_env
    from numlearn.training.run import train

    export_submitit_distributed_env()  # a SLURM / submitit task per GPU: RANK, WORLD_SIZE, MASTER_* from the job
    try:
        train(cfg)
    except (DataError, TokenizerDigitError, FileNotFoundError, ValueError, RunDirBusy) as e:
        if os.environ.get("NUMLEARN_DEBUG"):
            raise
        fail("numlearn.train", e, cfg.get("run_dir"), cfg.paths.output_dir)
    except Exception as e:  # a full disk or read-only output: one line (the run dir resumes)
        if (line := io_failure(e, cfg.paths.output_dir)) is None or os.environ.get("NUMLEARN_DEBUG"):
            raise
        sys.exit(f"numlearn.train: error: {line}")


def main(argv: list[str] | None = None) -> None:
    """``python -m numlearn.train [overrides]``; ``argv``: the overrides, to run it in-process (a test, a notebook)."""
    run_entry_point("numlearn.train", "config", _main, argv)


if __name__ == "__main__":
    main()
