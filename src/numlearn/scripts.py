"""The console scripts (``numlearn-train``, ``numlearn-evaluate``, ``numlearn-aggregate``,
``numlearn-pipeline``): each checks that its extra is installed, then runs its entry point. At the
top of the house: nothing imports it."""

from __future__ import annotations

from numlearn.cli import require_extra


def train_main() -> None:
    require_extra(("hydra", "omegaconf", "transformers", "datasets", "wandb"), "train", "numlearn-train")
    from numlearn.train import main

    main()


def evaluate_main() -> None:
    require_extra(("hydra", "omegaconf", "transformers", "tqdm"), "eval", "numlearn-evaluate")
    from numlearn.evaluate import main

    main()


def aggregate_main() -> None:
    require_extra(("pandas", "numpy", "omegaconf"), "eval", "numlearn-aggregate")
    from numlearn.reporting.aggregate import main

    main()


def pipeline_main() -> None:
    require_extra(("hydra", "omegaconf", "pandas"), "eval", "numlearn-pipeline")
    from numlearn.pipeline import main

    raise SystemExit(main())
