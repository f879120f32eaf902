"""Hydra entry point: ``python -m numlearn.evaluate [experiment=... loss=... seed=...] [model_path=...] [eval=...]``.

Evaluates a model directory or hub name on the benchmarks of ``eval`` and writes, per benchmark
and mode, ``<eval_dir>/<benchmark>/<mode>/generations.jsonl`` and ``result.json``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from numlearn.cli import (
    conf_dir,
    fail,
    io_failure,
    run_entry_point,
)

# The recipe lives in numlearn.evaluation.recipe (experiments and notebooks import it from there); these names
# stay importable from here.
from numlearn.evaluation.recipe import backend_from_config, generation_key, run_evaluation  # noqa: E402,F401


@hydra.main(version_base="1.3", config_path=conf_dir(), config_name="evaluate")
def _main(cfg: DictConfig) -> None:
    from numlearn.data.sources import DataError
    from numlearn.evaluation.sandbox import SandboxUnavailable

    try:
        evaluate(cfg)
    except Exception as e:  # noqa: BLE001 - one line for what users cause; anything else keeps its trace
        if (line := io_failure(e, cfg.get("eval_dir") or cfg.paths.output_dir)) is not None \
                and not os.environ.get("NUMLEARN_DEBUG"):
            sys.exit(f"numlearn.evaluate: error: {line}")
        if not isinstance(e, (DataError, FileNotFoundError, ImportError, ValueError, RuntimeError, SandboxUnavailable)):
            raise
        fail("numlearn.evaluate", e, cfg.get("eval_dir"), cfg.paths.output_dir)


def evaluate(cfg: DictConfig) -> list[Path]:
    """What ``python -m numlearn.evaluate`` does: the recipe (``numlearn.evaluation.recipe.run_evaluation``: result
    files) and then their metrics into the training's W&B run, where it recorded one."""
    paths = run_evaluation(cfg)
    _log_to_training_run(paths)
    return paths


def _log_to_training_run(paths: list) -> None:
    """The written results' metrics (read back from their files) into the training's W&B run, where the model's
    run.json recorded one: the evaluation's numbers beside the training curves."""
    if not paths or os.environ.get("WANDB_MODE") == "disabled":
        return
    from numlearn.records import ResultRecord, RunRecord

    results = [ResultRecord.read(p) for p in paths]
    model_path = results[0].extra.get("model_path")
    rec = RunRecord.of_model(model_path) if model_path else None
    ref = (rec.extra.get("wandb") if rec is not None else None) or None
    if not ref:
        return
    from numlearn.tracking import log_evaluation

    def numbers(d: dict | None) -> dict:
        return {k: float(v) for k, v in (d or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    logged = {f"eval/{p.parent.parent.name}/{p.parent.name}/{k}": v for p, r in zip(paths, results)
              for k, v in numbers(r.metrics).items()}
    logged.update({f"eval/teacher_forced/{k}": v for k, v in numbers(results[0].teacher_forced).items()})
    log_evaluation(ref, Path(model_path).parent, logged)
    print(f"[numlearn.evaluate] {len(logged)} metrics logged to the training's W&B run {ref['id']}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m numlearn.evaluate [overrides]``; ``argv``: the overrides, to run it in-process (a test, a notebook)."""
    run_entry_point("numlearn.evaluate", "evaluate", _main, argv)


if __name__ == "__main__":
    main()
