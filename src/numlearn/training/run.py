"""``train(cfg)``: one fine-tuning run from a composed config, writing a self-describing run dir.

Run dir layout::

    <run_dir>/config.yaml        resolved config
    <run_dir>/run.json           RunRecord (numlearn.records): provenance, data report, effective weight of
                                 the numeric term, status. Training records training only: every
                                 measurement (the teacher-forced digit metrics too) is numlearn.evaluate's
    <run_dir>/metrics.jsonl      every log record (loss, loss/ce, loss/aux, digit accuracy, entropy)
    <run_dir>/checkpoints/       Trainer checkpoints (resume point)
    <run_dir>/final/             model + tokenizer (what evaluation loads)
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from omegaconf import DictConfig, OmegaConf

from numlearn.losses import LOSSES, capabilities
from numlearn.provenance import provenance
from numlearn.records import RUN_META, RunRecord, write_via_tmp
from numlearn.rundirs import (
    RunDirLock,
    damaged_weights,
    data_file_hashes,
    input_differences,
    recipe_differences,
    recipe_sha,
    records_sha256,
    run_is_complete,
    training_recipe,
    weights_sha256,
)
from numlearn.training.launch import launch_info

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from numlearn.data.prompts import TrainingTemplate
    from numlearn.losses import TokenLoss

log = logging.getLogger(__name__)
# how the two ways out of a run dir that holds another recipe are given through the pipeline and make (issue 66)
THROUGH = ('(through the pipeline: --override experiment_name=<new name>; through make: ARGS="--override '
           'experiment_name=<new name>")')


def _abs(p) -> Path:
    return Path(str(p)).expanduser().resolve()


def loss_options(loss_cfg) -> dict:
    """Keyword arguments of ``build_loss`` from a ``conf/loss`` node: every key but ``name``, ``tag`` (the name
    of a loss config that varies a loss's options: it names the run dir) and the options left null."""
    return {k: v for k, v in OmegaConf.to_container(loss_cfg, resolve=True).items()
            if k not in ("name", "tag") and v is not None}  # null: the loss's own default



@dataclass
class RunPlan:
    """Everything a run is decided by before any model weight is loaded, each decision made once here
    (``plan_run``) and read from here by the rest of the run and by its record (``run_metadata``)."""

    run_dir: Path
    tokenizer: PreTrainedTokenizerBase
    loss_fn: TokenLoss
    template: TrainingTemplate  # this process's training template
    world_size: int
    grad_accum: int
    records: Callable[[], list[dict]]  # the training records (loaded once, on first use)
    model_dir: Path | None = None  # model.source=run: the base run's final/ the weights start from
    fused_linear: bool = False  # the loss from hidden states and the head (train.fused_linear_loss)
    template_draw: str = "run"  # one template draw per run, or per rank (data.template_draw)
    templates: list[dict] = field(default_factory=list)  # every rank's template, as run.json records them

    @property
    def effective_weight(self) -> float | None:
        fn = getattr(self.loss_fn, "effective_weight", None)
        return fn(self.grad_accum, self.world_size) if fn else None


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of a launched job (torchrun / accelerate / SLURM set ``RANK``), or a single process: the
    one that writes the run dir's records, so ranks never race on the same file."""
    return int(os.environ.get("RANK", "0")) == 0


def official_weight_check(cfg, plan: RunPlan) -> dict:
    """This run's effective weight against its preset's official one (``paper_row``); a mismatch
    is reported, not refused -- sweeps and other layouts are legitimate, but must be visible."""
    row = cfg.get("paper_row")
    eff = plan.effective_weight
    if not row or eff is None or cfg.loss.name not in (row.get("effective") or {}):
        return {}
    official = float(row.effective[cfg.loss.name])
    out = {"official_effective_weight": official, "official_script": row.get("script"),
           "matches_official": math.isclose(eff, official, rel_tol=1e-9)}
    if not out["matches_official"]:
        how = (f"alpha {plan.loss_fn.alpha} x GA {plan.grad_accum} x {plan.world_size} process(es)"
               if plan.loss_fn.aux_normalization == "microbatch_sum" else f"alpha {plan.loss_fn.alpha}")
        log.warning(f"the {cfg.loss.name} term's effective weight is {eff:g} ({how}, "
                    f"aux_normalization={plan.loss_fn.aux_normalization}); this preset's row ran at {official:g} "
                    f"({row.get('script')})")
    return out


SAMPLINGS = ("random", "group_by_length")
FUSED_CHOICES = (True, False, "auto", None)


def uses_fused_linear_loss(cfg) -> bool:
    """``train.fused_linear_loss``: true, false, or auto = on for every loss that declares a linear
    form (``numlearn.losses.capabilities``: MLE, NTL, DIST2, DEL, MixCE), off for the others (EMO)."""
    fused = cfg.train.get("fused_linear_loss")
    if fused == "auto":
        return capabilities(str(cfg.loss.name)).linear_form
    return bool(fused)


def check_run_options(cfg) -> None:
    """Refuse option combinations that cannot mean what the user asked, before anything loads."""
    from numlearn.schema import check_ranges

    check_ranges(cfg)  # every value inside its schema's range (a NaN weight, a fractional seed, ...)
    if cfg.get("harness_name") == "official" and not cfg.get("paper_row"):
        raise ValueError("harness=official reproduces a paper preset's own script: add experiment=table1_<model> "
                         "(or ablation_qwen2.5-1.5b)")
    # the schema (numlearn.schema.TrainConfig) types every key; what a type cannot say is checked here
    for key in ("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "max_length"):
        v = cfg.train.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            hint = " (null trains train.num_train_epochs epochs)" if key == "max_steps" else ""
            raise ValueError(f"train.{key}={v!r} must be a positive integer{hint}")
    fused = cfg.train.get("fused_linear_loss")
    if fused not in FUSED_CHOICES:
        raise ValueError(f"train.fused_linear_loss={fused!r}; choose true, false or auto (on for the losses that have "
                         "a linear form)")
    if fused is True and not capabilities(str(cfg.loss.name)).linear_form:
        linear = sorted(n for n in LOSSES if capabilities(n).linear_form)
        raise ValueError(f"train.fused_linear_loss=true: loss={cfg.loss.name} works on full logits only; "
                         f"use {', '.join(linear)}, or set it to false (or auto)")
    if fused is not False and cfg.train.get("fsdp") and int((cfg.train.get("fsdp_config") or {}).get("version", 2)) == 1:
        raise ValueError("train.fused_linear_loss with FSDP1 (train.fsdp_config.version=1) is untested: FSDP1's flat "
                         "parameters are not the head weight outside its forward; use FSDP2 (version 2) or set it to false")
    sampling = cfg.train.sampling
    if sampling not in SAMPLINGS:
        raise ValueError(f"train.sampling={sampling!r}; choose one of {SAMPLINGS}")
    if sampling == "group_by_length" and template_draw(cfg) == "rank" and cfg.data.template == "official":
        raise ValueError("train.sampling=group_by_length with data.template_draw=rank: each rank's lengths come from "
                         "its own template, so the ranks would group (and shard) the examples differently; use "
                         "train.sampling=random or data.template_draw=run")
    top = cfg.train.get("trainable_layers")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"train.trainable_layers={top!r}: null (every weight trains) or the number of top decoder "
                         "layers that train (>= 1)")
    if top is not None and cfg.train.get("fsdp"):
        raise ValueError("train.trainable_layers with train.fsdp is untested (frozen and trained weights in one shard "
                         "group); fine-tune every layer under FSDP, or freeze without it")
    packing = cfg.train.get("packing")
    if packing not in (None, False, True) and not (isinstance(packing, int) and packing >= 1):
        raise ValueError(f"train.packing={packing!r}: false, true (rows of 2x the longest example) or the row "
                         "capacity as a multiple of the batch's longest example (an integer >= 1)")
    if packing and cfg.train.attention_mask:
        raise ValueError("train.packing needs train.attention_mask=false: packed examples are kept apart through "
                         "restarting position_ids, which transformers reads only when no attention mask is passed")


def template_draw(cfg) -> str:
    from numlearn.data.prompts import TEMPLATE_DRAWS

    draw = cfg.data.get("template_draw") or "run"
    if draw not in TEMPLATE_DRAWS:
        raise ValueError(f"data.template_draw={draw!r}; choose one of {TEMPLATE_DRAWS}")
    return draw


def template_rank(cfg, rank: int | None = None) -> int | None:
    """The rank a process's template draw is seeded with: its global rank under
    ``data.template_draw=rank``, None (one draw for the run) otherwise."""
    if template_draw(cfg) != "rank":
        return None
    return int(os.environ.get("RANK", "0")) if rank is None else rank


def rank_templates(cfg, world_size: int) -> list[dict]:
    """Every rank's template (``run.json``'s ``templates``): the draws are deterministic, so rank
    0 records them all."""
    from numlearn.data.prompts import training_template

    mode = cfg.data.template
    return [{"rank": r, "official_index": training_template(mode, int(cfg.seed), template_rank(cfg, r)).index}
            for r in range(max(int(world_size), 1))]


def plan_run(cfg) -> RunPlan:
    """Resolve data access, tokenizer, training template and loss -- no model weights."""
    from numlearn.data.prompts import format_prompt, training_template
    from numlearn.data.sources import load_source
    from numlearn.losses import build_loss
    from numlearn.training.model import base_model_dir, build_tokenizer

    check_run_options(cfg)
    cache_dir = _abs(cfg.paths.cache_dir)
    model_dir = (base_model_dir(cfg.model, _abs(cfg.paths.output_dir), int(cfg.seed))
                 if cfg.model.get("source") == "run" else None)

    def load():
        recs = load_source(cfg.data, _abs(cfg.paths.data_dir), cache_dir)
        if not recs:
            raise ValueError(f"data config {cfg.data.name!r} produced no training records")
        return recs

    records = functools.cache(load)  # loaded once, on first use (a dry run with a hub tokenizer never does)
    template = training_template(cfg.data.template, int(cfg.seed), template_rank(cfg))
    tokenizer = build_tokenizer(cfg.model, lambda: [format_prompt(r["instruction"]) + r["output"] for r in records()],
                                cache_dir, _abs(cfg.paths.root_dir), cfg.paths.get("assets_dir"), model_dir=model_dir)
    loss_fn = build_loss(cfg.loss.name, tokenizer, **loss_options(cfg.loss))
    world_size = world_size_from_env()
    return RunPlan(run_dir=_abs(cfg.run_dir), tokenizer=tokenizer, loss_fn=loss_fn, template=template,
                   world_size=world_size, grad_accum=int(cfg.train.gradient_accumulation_steps),
                   records=records, model_dir=model_dir, fused_linear=uses_fused_linear_loss(cfg),
                   template_draw=template_draw(cfg), templates=rank_templates(cfg, world_size))


def base_provenance(model_dir: str | Path) -> dict:
    """What a fine-tune of a stored run (``model.source=run``) records of its base: the base's run
    dir, recipe sha and training commit (its ``run.json``) and the sha256 of the weights it started
    from. Two fine-tunes from bases with other weights (another machine, another commit) differ
    even under one recipe; this says which base each result stands on."""
    d = Path(model_dir)
    rec = RunRecord.of_model(d)
    return {"run_dir": str(d.parent if rec else d), "recipe_sha": rec.recipe_sha if rec else None,
            "git": rec.git if rec else None, "weights_sha256": weights_sha256(d)}


def run_metadata(cfg, plan: RunPlan, status: str) -> dict:
    return {
        "status": status, "experiment": cfg.experiment_name, "model": cfg.model.name, "loss": cfg.loss.name,
        **({"loss_tag": str(v)} if (v := cfg.loss.get("tag")) else {}),
        "alpha": cfg.loss.get("alpha"), "seed": int(cfg.seed), "run_dir": str(plan.run_dir),
        "loss_repr": repr(plan.loss_fn),
        "harness": cfg.get("harness_name", "numlearn"),
        "aux_normalization": getattr(plan.loss_fn, "aux_normalization", None),
        "ce_normalization": getattr(plan.loss_fn, "ce_normalization", None),
        "aux_effective_weight": plan.effective_weight,
        "aux_effective_weight_note": "weight of the numeric term relative to the step's digit-target mean (step) "
                                     "or mean of per-example digit means (example_mean): alpha for "
                                     "aux_normalization=step, example_mean or microbatch_mean, alpha x grad_accum x "
                                     "world_size for microbatch_sum (train-qwen-deepseek.py)",
        **official_weight_check(cfg, plan),
        "grad_accum": plan.grad_accum, "world_size": plan.world_size, "launch": launch_info(),
        "template": plan.template.describe(),
        "template_draw": plan.template_draw, "templates": plan.templates,
        "boundary": cfg.data.boundary,
        "vocab_setup": cfg.model.get("vocab_setup"), "tokenizer_len": len(plan.tokenizer),
        "fused_linear_loss": plan.fused_linear,
        "fsdp": bool(cfg.train.get("fsdp")),
        **({"base": base_provenance(plan.model_dir)} if plan.model_dir is not None else {}),
        # what decides the weights, so a stored result can be matched to the preset that made it
        "recipe": (recipe := training_recipe(cfg)), "recipe_sha": recipe_sha(recipe),
        # and the content of what it read: a changed file under the same recipe is another run (TrainRecipe.run)
        "inputs": {"data_files": data_file_hashes(cfg.data, _abs(cfg.paths.data_dir))},
        **provenance(),
    }


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the records up to the checkpoint a run resumes from: the steps after it are redone."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("step", 0) <= step:
            keep.append(line)
    write_via_tmp(path, lambda tmp: tmp.write_text("".join(k + "\n" for k in keep)))


def last_complete_checkpoint(ckpt_dir: Path) -> str | None:
    """The newest checkpoint whose save finished: ``trainer_state.json`` is written last, so a job
    killed while saving (preemption, time limit) leaves a newer directory without it, which the
    Trainer's own ``get_last_checkpoint`` would resume from and fail on."""
    if not ckpt_dir.is_dir():
        return None
    found = sorted(((int(p.name.split("-")[-1]), p) for p in ckpt_dir.glob("checkpoint-*")
                    if p.is_dir() and p.name.split("-")[-1].isdigit()), reverse=True)
    for _step, path in found:
        if (path / "trainer_state.json").is_file():
            return str(path)
        log.warning(f"{path} is incomplete (no trainer_state.json: the save was interrupted); "
                    "skipping it")
    return None


def whole_run_loss(path: Path) -> float | None:
    """Mean training loss over the whole run from ``metrics.jsonl``: each logged loss is the mean
    since the previous log, so it is weighted by the steps it covers."""
    if not path.exists():
        return None
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    logs = sorted((r["step"], r["loss"]) for r in recs if "loss" in r and "step" in r)
    tot = n = prev = 0
    for step, loss in logs:
        tot += loss * (step - prev)
        n += step - prev
        prev = step
    return tot / n if n else None


class TrainRecipe:
    """One training run of a composed config. ``plan()`` makes every decision once -- data access, tokenizer,
    loss and its effective weight, the template draw, the fused path -- without loading a weight, and
    returns the typed ``RunPlan``; ``record(status)`` is that plan's run.json. ``fit()`` runs the plan
    in its run dir (model, Trainer, resume, train, save, the completed record). ``run()`` is what
    ``python -m numlearn.train`` does: a complete run is skipped, the run dir is held while it trains.

        recipe = TrainRecipe(cfg)
        plan = recipe.plan()          # errors in the config come here, before any weight loads
        plan.effective_weight, plan.fused_linear, plan.templates
        run_dir = recipe.run()
    """

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self._plan: RunPlan | None = None

    def plan(self) -> RunPlan:
        if self._plan is None:
            self._plan = plan_run(self.cfg)  # every option checked, loss built: errors before any weight loads
        return self._plan

    def record(self, status: str) -> dict:
        """run.json of the plan with ``status`` (running, complete, dry_run)."""
        return run_metadata(self.cfg, self.plan(), status)

    def inputs(self, records: bool = True) -> dict:
        """The content hashes of what this run reads (run.json's ``inputs``): its local data files and, with
        ``records``, the training records as converted (loaded here, so skipped where nothing compares them)."""
        cfg = self.cfg
        out = {"data_files": data_file_hashes(cfg.data, _abs(cfg.paths.data_dir))}
        if records:
            out["records_sha256"] = records_sha256(self.plan().records())
        return out

    def fit(self) -> Path:
        """Run the plan in its run dir (``force`` clears it first; ``dry_run`` writes the record and stops)."""
        plan = self.plan()
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        return _train_in(self.cfg, plan, plan.run_dir, is_main_process())

    def run(self) -> Path:
        """``fit()`` unless the run dir holds this recipe's complete run; the main process holds the run
        dir's lock while it trains (one training per run dir)."""
        cfg = self.cfg
        run_dir = _abs(cfg.run_dir)
        if (run_dir / "final").is_dir() and (bad := damaged_weights(run_dir / "final")):
            log.warning(f"{run_dir / 'final'} has damaged weights ({'; '.join(bad)}): not complete, "
                        "training again (from the last checkpoint, if any)")
        if run_is_complete(run_dir) and not cfg.get("force", False) and not cfg.get("dry_run", False):
            done = RunRecord.of_run_dir(run_dir)  # read once: its recipe and the hashes of its inputs
            have = done.recipe
            if have is not None and (diff := recipe_differences(training_recipe(have), training_recipe(cfg))):
                raise ValueError(f"{run_dir} holds a complete run trained under another recipe ({'; '.join(diff[:4])}"
                                 f"{' ...' if len(diff) > 4 else ''}): give this one a run dir of its own with "
                                 f"experiment_name=<new name>, or replace that run with force=true {THROUGH}")
            stored = done.extra.get("inputs") or {}
            if diff := input_differences(stored, self.inputs(records="records_sha256" in stored)):
                raise ValueError(f"{run_dir} holds a complete run trained on other data ({'; '.join(diff[:3])}): the "
                                 "same recipe on changed data is another run; give it a run dir of its own with "
                                 f"experiment_name=<new name>, or replace that run with force=true {THROUGH}")
            log.info("already complete, skipping: %s (force=true to retrain)", run_dir)
            return run_dir
        self.plan()
        if is_main_process() and not cfg.get("dry_run", False):
            run_dir.mkdir(parents=True, exist_ok=True)
            with RunDirLock(run_dir / "train.lock", "training",
                            "wait for it to finish (its run then reads as complete), or stop it first"):
                return self.fit()
        return self.fit()


def train(cfg: DictConfig) -> Path:
    """Train the run ``cfg`` composes: ``TrainRecipe(cfg).run()``."""
    return TrainRecipe(cfg).run()


def _train_in(cfg: DictConfig, plan: RunPlan, run_dir: Path, main: bool) -> Path:
    from transformers import set_seed

    if cfg.get("force", False) and not cfg.get("dry_run", False) and main:
        # force = retrain from scratch: an old checkpoint must not be resumed under a new config
        for name in ("checkpoints", "final"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        for name in ("metrics.jsonl", "run.json"):
            (run_dir / name).unlink(missing_ok=True)
        log.info(f"force=true: previous checkpoints and records removed from {run_dir}")
    if cfg.get("dry_run", False):
        meta = run_metadata(cfg, plan, "dry_run")
        paper_ws = int((cfg.get("paper_row") or {}).get("world_size") or 0)
        if paper_ws > plan.world_size:  # what the preset's own layout would draw
            meta["templates_at_paper_layout"] = rank_templates(cfg, paper_ws)
        if not main:
            return run_dir
        RunRecord.from_dict(meta).write(run_dir / ("run.dry_run.json" if run_is_complete(run_dir) else RUN_META))
        log.info(f"dry run: {cfg.loss.name} effective weight {meta['aux_effective_weight']} "
                 f"(world size {plan.world_size}, GA {plan.grad_accum}); template {meta['template']['mode']}"
                 f"{'' if meta['template']['official_index'] is None else ' #' + str(meta['template']['official_index'])}"
                 f" (draw per {meta['template_draw']}"
                 + (f"; ranks of the preset's layout: {[t['official_index'] for t in meta['templates_at_paper_layout']]}"
                    if "templates_at_paper_layout" in meta else "")
                 + f"); aux {meta['aux_normalization']}, ce {meta['ce_normalization']}"
                 + f"; vocab {meta['vocab_setup'] or 'checkpoint'} ({meta['tokenizer_len']} tokens)"
                 f"; boundary {meta['boundary']} -> {run_dir}")
        return run_dir
    if tcfg_threads := cfg.train.get("torch_threads"):
        torch.set_num_threads(int(tcfg_threads))
    if main:
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    set_seed(int(cfg.seed))
    return _fit(cfg, plan)


def _fit(cfg: DictConfig, plan: RunPlan) -> Path:
    """Run ``plan``: data, model, the run's record, the Trainer, resume, train, save, complete the record."""
    from numlearn.data.collate import tokenize_records
    from numlearn.training.model import build_model

    tcfg, run_dir, tokenizer, loss_fn = cfg.train, plan.run_dir, plan.tokenizer, plan.loss_fn
    final_dir, meta_path = run_dir / "final", run_dir / "run.json"
    records = plan.records()
    feats, report = tokenize_records(records, tokenizer, int(tcfg.max_length), plan.template,
                                     cfg.data.boundary)
    log.info("data: %s", report.as_dict())
    if report.n_truncated:
        log.warning(f"{report.n_truncated} of {len(records)} examples truncated to "
                    f"max_length={tcfg.max_length}")
    model = build_model(cfg.model, tokenizer, _abs(cfg.paths.cache_dir), seed=int(cfg.seed), model_dir=plan.model_dir)
    if loss_fn.needs_model_embeddings:
        loss_fn.bind_model(model)  # EMO's cost: the output embedding at initialisation
    frozen = None
    if tcfg.get("trainable_layers") is not None:
        from numlearn.training.model import train_top_layers

        frozen = train_top_layers(model, int(tcfg.trainable_layers))
    if tcfg.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable()
    meta = {**run_metadata(cfg, plan, "running"), "data": {"name": cfg.data.name, **report.as_dict()},
            "n_params": sum(p.numel() for p in model.parameters()), **({"frozen": frozen} if frozen else {})}
    meta["inputs"]["records_sha256"] = records_sha256(records)
    main = is_main_process()
    if main:
        RunRecord.from_dict(meta, meta_path).write()
    wandb = cfg.logger.name == "wandb" and main
    if wandb:
        from numlearn.tracking import init_run, run_ref

        meta["wandb"] = run_ref(init_run(cfg, run_dir))  # the evaluation logs its results into this run
        RunRecord.from_dict(meta, meta_path).write()
    use_cuda = torch.cuda.is_available()
    args = training_arguments(cfg, plan, use_cuda)
    trainer = build_trainer(cfg, plan, model, feats, args)
    last = resume_point(args, run_dir, main)
    t0 = time.time()
    try:
        result = trainer.train(resume_from_checkpoint=last)
        # this process's peak during training (before the final save and the held-out pass)
        peak = ({"allocated_bytes": torch.cuda.max_memory_allocated(), "reserved_bytes": torch.cuda.max_memory_reserved(),
                 "device": torch.cuda.get_device_name()} if use_cuda else None)
        from numlearn.training.hf_trainer import NonFiniteStep

        if bad := nonfinite_parameters(trainer.model):  # the steps were checked; this covers a frozen start too
            raise NonFiniteStep(f"the trained model has non-finite weights ({', '.join(bad[:3])}"
                                f"{' ...' if len(bad) > 3 else ''}): not saved as final nor marked complete; lower "
                                "train.learning_rate and re-run with force=true")
        trainer.save_model(str(final_dir))
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(str(final_dir))
        whole = whole_run_loss(run_dir / "metrics.jsonl")
        train_metrics = {**result.metrics, **({"train_loss": whole} if whole is not None else {}),
                         "train_loss_note": "mean of the logged losses over the whole run, resumes included"}
        meta.update(status="complete", train_runtime_s=round(time.time() - t0, 2), resumed_from=last,
                    train_metrics=train_metrics, global_step=trainer.state.global_step)
        if peak is not None:
            meta["peak_gpu_memory"] = peak
        if trainer.is_world_process_zero():
            RunRecord.from_dict(meta, meta_path).write()
            log.info(f"done in {time.time() - t0:.1f}s -> {final_dir}")
    except ValueError as e:  # NonFiniteStep: the record says why the run stopped (never complete)
        if type(e).__name__ == "NonFiniteStep" and trainer.is_world_process_zero():
            meta.update(status="failed", failure=str(e))
            RunRecord.from_dict(meta, meta_path).write()
        raise
    finally:
        if wandb:
            from numlearn.tracking import finish_run

            finish_run()
    return run_dir


def nonfinite_parameters(model) -> list[str]:
    """The names of ``model``'s parameters holding a NaN or an infinity (one host read per parameter)."""
    return [n for n, p in model.named_parameters() if p.numel() and not bool(torch.isfinite(p.detach()).all())]


def training_arguments(cfg: DictConfig, plan: RunPlan, use_cuda: bool):
    """The Trainer's arguments of ``cfg.train`` for ``plan``'s run dir and accumulation."""
    from transformers import TrainingArguments

    tcfg, run_dir = cfg.train, plan.run_dir
    return TrainingArguments(
        output_dir=str(run_dir / "checkpoints"),
        per_device_train_batch_size=int(tcfg.per_device_train_batch_size),
        gradient_accumulation_steps=plan.grad_accum,
        learning_rate=float(tcfg.learning_rate),
        lr_scheduler_type=tcfg.lr_scheduler_type,
        # transformers 5.19 reads a float warmup_steps in [0, 1) as a fraction of the total steps,
        # which is what train.warmup_ratio is.
        warmup_steps=float(tcfg.warmup_ratio),
        weight_decay=float(tcfg.weight_decay),
        adam_beta2=float(tcfg.get("adam_beta2", 0.999)),
        max_grad_norm=float(tcfg.max_grad_norm),
        num_train_epochs=float(tcfg.num_train_epochs),
        max_steps=int(tcfg.get("max_steps") or -1),
        logging_steps=int(tcfg.logging_steps),
        save_strategy="steps",
        save_steps=int(tcfg.save_steps),
        save_total_limit=int(tcfg.save_total_limit),
        bf16=bool(tcfg.get("bf16", False)) and use_cuda,
        seed=int(cfg.seed),
        data_seed=int(cfg.seed),
        report_to=["wandb"] if cfg.logger.name == "wandb" else [],
        run_name=str(cfg.get("run_name") or run_dir.name),
        dataloader_num_workers=int(tcfg.dataloader_num_workers),
        remove_unused_columns=False,
        disable_tqdm=bool(tcfg.disable_tqdm),
        use_cpu=not use_cuda,
        fsdp=tcfg.get("fsdp") or "",
        fsdp_config=(OmegaConf.to_container(tcfg.fsdp_config, resolve=True)
                     if tcfg.get("fsdp") and tcfg.get("fsdp_config") else None),
        gradient_checkpointing=bool(tcfg.gradient_checkpointing),
        # non-padding input tokens in every log record (a gather per micro-batch: throughput checks)
        include_num_input_tokens_seen="non_padding" if tcfg.count_input_tokens else "no",
        average_tokens_across_devices=True,
        # group_by_length: batches of similar lengths (fewer pad tokens), still shuffled by the seed
        train_sampling_strategy=str(tcfg.sampling),
        ddp_timeout=int(tcfg.ddp_timeout_s),
        logging_nan_inf_filter=False,  # a non-finite loss stops the run (NonFiniteStep), never hidden in the logs
    )


def build_trainer(cfg: DictConfig, plan: RunPlan, model, feats, args):
    """The NumlearnTrainer of ``plan``: its loss bridge (the fused path as planned), collator (padding or packing),
    and callbacks (metrics.jsonl, one progress line, W&B without HF's double prefix)."""
    from numlearn.data.collate import PackCollator, PadCollator
    from numlearn.training.hf_trainer import LossBridge, MetricsJSONL, NumlearnTrainer, ProgressPrinter

    tcfg, tokenizer = cfg.train, plan.tokenizer
    bridge = LossBridge(plan.loss_fn, fused_linear=plan.fused_linear,
                        chunk_size=loss_chunk_size(tcfg.get("loss_chunk_size")))
    extra = {"logits_to_keep": 1} if plan.fused_linear else None
    packing = tcfg.get("packing")
    collator = (PackCollator(tokenizer.pad_token_id, 2 if packing is True else int(packing), extra=extra) if packing
                else PadCollator(tokenizer.pad_token_id, with_attention_mask=bool(tcfg.attention_mask),
                                 extra=extra))
    trainer = NumlearnTrainer(
        model=model, args=args, train_dataset=feats, data_collator=collator,
        processing_class=tokenizer, loss_bridge=bridge,
        callbacks=[MetricsJSONL(plan.run_dir / "metrics.jsonl"), ProgressPrinter()],
    )
    if cfg.logger.name == "wandb":  # report_to=wandb adds HF's callback: ours in its place (no train/train/ keys)
        from transformers.integrations import WandbCallback

        from numlearn.training.hf_trainer import wandb_callback

        trainer.remove_callback(WandbCallback)
        trainer.add_callback(wandb_callback()())
    if args.disable_tqdm:
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # ProgressPrinter prints one readable line instead
    return trainer


def loss_chunk_size(value) -> int | str:
    """``train.loss_chunk_size``: a number of target rows, or ``auto`` (sized from H and V per batch)."""
    if value is None:
        return 1024
    if str(value) == "auto":
        return "auto"
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or isinstance(value, bool):
        raise ValueError(f"train.loss_chunk_size={value!r}: give target rows per chunk (an int >= 1) or auto")
    return n


def resume_point(args, run_dir: Path, main: bool) -> str | None:
    """The last complete checkpoint to resume from (None: from the start). Rank 0 chooses it and trims the
    records to it first (or removes them when there is none); the other ranks then read the same directory
    (a barrier in between, in a multi-process run)."""
    metrics_path = run_dir / "metrics.jsonl"
    with args.main_process_first(local=False, desc="resume point"):
        last = last_complete_checkpoint(run_dir / "checkpoints")
        if main and last:
            log.info(f"resuming from {last}")
            truncate_metrics(metrics_path, int(Path(last).name.split("-")[-1]))
        elif main and metrics_path.exists():
            metrics_path.unlink()  # no checkpoint: the run starts over, so do its records
    return last
