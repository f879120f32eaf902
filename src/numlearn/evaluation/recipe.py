"""The evaluation recipe: a composed ``evaluate`` config -> one result file per benchmark x mode.

``run_evaluation(cfg)`` checks every input before the model loads (protocol, limit, sandbox, model directory,
benchmark data), runs the teacher-forced pass where configured, then each benchmark's modes (``EvalTask`` ->
``run_task`` -> ``result_fields`` -> ``ResultRecord``). ``numlearn.evaluate`` is its command line: it parses,
calls and reports; experiments and notebooks call this module.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from numlearn.provenance import model_fingerprint

log = logging.getLogger("numlearn.evaluate")


def backend_from_config(ecfg, model_path: str, seed: int = 0):
    """The generation backend an ``eval`` config describes (every engine argument from config)."""
    from .backends import get_backend

    return get_backend(ecfg.backend, model_path, dtype=ecfg.dtype, batch_size=ecfg.batch_size,
                       tensor_parallel_size=int(ecfg.get("tensor_parallel_size") or 1),
                       max_model_len=int(ecfg.max_model_len), seed=int(seed),
                       enforce_eager=bool(ecfg.enforce_eager))


@dataclass(frozen=True)
class _Evaluation:
    """What every benchmark x mode of one evaluation shares (fixed before the first generation)."""

    cfg: DictConfig
    eval_dir: Path
    protocol: str
    model_path: str
    run_meta: dict
    sandbox: dict
    teacher_forced: dict | None
    model_key: dict
    provenance: dict


def run_evaluation(cfg: DictConfig) -> list[Path]:
    """Evaluate ``cfg.model_path`` on ``cfg.eval``'s benchmarks: one result file per benchmark x mode (returned).
    Every input is checked before the model loads: protocol, limit, sandbox, model directory, benchmark data."""
    from numlearn.provenance import provenance
    from numlearn.records import RunRecord
    from numlearn.schema import check_ranges

    from .benchmarks import check_limit, load_benchmark
    from .scorers import check_protocol

    check_ranges(cfg)  # every value inside its schema's range (batch size, caps, workers, timeouts, the seed)
    ecfg = cfg.eval
    protocol = check_protocol(str(ecfg.protocol))
    check_limit(ecfg.get("limit"))
    sandbox = _sandbox(bool(ecfg.allow_unsafe_exec))  # refused before any model or generation
    model_path = _model_path(str(cfg.model_path))
    data_root = Path(str(cfg.paths.data_dir)).expanduser()
    cache_dir = Path(str(cfg.paths.cache_dir)).resolve()
    # Load (and verify) every benchmark before the model, so data errors surface in seconds.
    loaded = {name: load_benchmark(bcfg, data_root, cache_dir, limit=ecfg.get("limit"))
              for name, bcfg in ecfg.benchmarks.items()}
    tf_records, tcfg = None, ecfg.get("teacher_forced")
    if tcfg:
        from .teacher_forced import teacher_forced_records

        tf_records = teacher_forced_records(tcfg, cfg.data, data_root, cache_dir)
    rec = RunRecord.of_model(model_path)
    fingerprint = model_fingerprint(model_path)  # the model dir is walked once
    run_meta = rec.summary() if rec is not None else adhoc_run_meta(cfg, model_path, fingerprint)
    eval_dir = Path(str(cfg.eval_dir)).resolve()
    check_not_another_models(eval_dir, fingerprint, own_run=rec is not None and eval_dir == Path(model_path).parent / "eval")
    if not Path(model_path).exists() and os.environ.get("HF_HUB_OFFLINE") == "1" and not _in_hub_cache(model_path):
        raise FileNotFoundError(f"model {model_path!r} is neither a directory nor a cached hub model, and the hub is "
                                "offline (HF_HUB_OFFLINE=1): pass model_path=<model dir> or train the run first")
    if cfg.get("dry_run"):  # what would run, every input checked, before any weight loads
        for line in evaluation_plan(cfg, model_path, eval_dir, loaded, tf_records, protocol):
            log.info(line)
        return []
    if threads := ecfg.get("torch_threads"):
        import torch

        torch.set_num_threads(int(threads))  # before the backend: recorded in provenance below
    from .backends import GreedyReuse

    backend = GreedyReuse(backend_from_config(ecfg, model_path, seed=int(cfg.seed)))  # modes share greedy prompts
    # what the generations come from, fixed for this evaluation (the model dir is walked once)
    model_key = {"model": fingerprint, "backend": backend.name, "dtype": backend.describe().get("dtype")}
    ev = _Evaluation(cfg, eval_dir, protocol, model_path, run_meta, sandbox, None, model_key, provenance())
    # every generation first, then the teacher-forced pass (on the device vLLM has released), then the results
    generated = [g for name, (problems, info) in loaded.items() for g in _generate(ev, name, problems, info, backend)]
    described = backend.describe()
    if tcfg:
        ev = replace(ev, teacher_forced=_teacher_forced(tcfg, tf_records, backend, model_path))
    return [_write_result(ev, g, described) for g in generated]


def evaluation_plan(cfg: DictConfig, model_path: str, eval_dir: Path, loaded: dict, tf_records, protocol: str
                    ) -> list[str]:
    """``dry_run=true``: what the evaluation would do -- the model, backend, protocol and where the results go;
    per benchmark its modes, problems and token cap (and how many lines are already generated there, which it
    resumes); the teacher-forced pass -- as lines, with nothing loaded or generated."""
    from .runner import read_jsonl
    from .spec import BenchmarkSpec

    ecfg = cfg.eval
    lines = [f"dry run: {model_path} -> {eval_dir}", f"  backend {ecfg.backend}, dtype {ecfg.dtype}, protocol "
             f"{protocol}, batch {ecfg.batch_size}, tensor parallel {ecfg.get('tensor_parallel_size') or 1}"]
    for name, (problems, _) in loaded.items():
        spec = BenchmarkSpec.from_config(ecfg.benchmarks[name])
        cap = min(spec.max_new_tokens, int(ecfg.max_new_tokens_cap or spec.max_new_tokens))
        for mode in spec.modes(ecfg.modes):
            gen = eval_dir / name / mode / "generations.jsonl"
            have = len(read_jsonl(gen)[0]) if gen.is_file() else 0
            lines.append(f"  {name}/{mode}: {len(problems)} problems, up to {cap} new tokens"
                         + (f" ({have} already generated: resumed)" if have else ""))
    if tf_records is not None:
        tcfg = ecfg.teacher_forced
        pc = tcfg.get("prefix_cache")
        lines.append(f"  teacher forced: {len(tf_records)} solutions ({tcfg.source}), max length {tcfg.max_length}, "
                     f"dtype {tcfg.get('dtype') or 'auto'}, device {tcfg.get('device') or 'auto'}"
                     + (f", frozen layers {pc.frozen_layers} cached in {pc.dir}" if pc else ""))
    return lines


def adhoc_run_meta(cfg: DictConfig, model_path: str, fingerprint: str) -> dict:
    """What a result records of a model no numlearn run produced (a hub id, a directory, a checkpoint): its name,
    path and fingerprint, and ``base`` for its loss -- nothing of the composed config's default training run
    (whose model, loss and data are not this model's). Where the preset describes this very model
    (``model.name_or_path`` is ``model_path``), the preset's model name labels it."""
    from numlearn.schema import model_label

    mc = cfg.model
    same = mc.get("name_or_path") and _same_model(str(mc.name_or_path), model_path)
    return {"experiment": cfg.experiment_name, "model": str(mc.name) if same else model_label(model_path),
            "loss": "base", "alpha": None, "seed": None, "run_dir": None,
            "model_path": model_path, "model_fingerprint": fingerprint,
            "training": "unknown: not a numlearn run (no run.json beside the model)"}


def _same_model(a: str, b: str) -> bool:
    return a == b or (Path(a).exists() and Path(b).exists() and Path(a).resolve() == Path(b).resolve())


def stored_fingerprint(result: dict) -> str | None:
    """The model fingerprint a result file's generations came from (its run key), or None where it has none."""
    key = ((result.get("generation") or {}).get("chain") or {}).get("run_key")
    try:
        return json.loads(json.loads(key)["generation"])["model"] if key else None
    except (ValueError, KeyError, TypeError):
        return None


def check_not_another_models(eval_dir: Path, fingerprint: str, own_run: bool) -> None:
    """Refuse, before any generation, an evaluation whose ``eval_dir`` holds results of another model (another
    fingerprint): they would be regenerated over, and the first model's results lost. A training run's own
    ``eval/`` is exempt: a retrained run's new model replaces its old results there."""
    if own_run or not eval_dir.is_dir():
        return
    for f in sorted(eval_dir.glob("*/*/result.json")):
        try:
            other = stored_fingerprint(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
        if other is not None and other != fingerprint:
            raise ValueError(f"{eval_dir} holds results of another model ({other}; e.g. {f.relative_to(eval_dir)}); "
                             "this one would write over them: give it its own directory with eval_dir=<dir> (by "
                             "default each model gets outputs/eval/<name>/<id>), or move the old results away")


def _sandbox(allow_unsafe: bool) -> dict:
    """How generated programs will run (recorded in every result); refused without OS isolation unless allowed."""
    from .sandbox import SandboxUnavailable, isolation_status

    isolated, isolation = isolation_status()
    if not isolated and not allow_unsafe:
        raise SandboxUnavailable(isolation)
    return {"isolation": isolation if isolated else "process (unsafe): " + isolation, "allow_unsafe_exec": allow_unsafe}


def _model_path(model_path: str) -> str:
    """The model directory (resolved) or hub name; a missing local path or damaged weights refused by name."""
    from numlearn.rundirs import check_model_dir, damaged_weights

    check_model_dir(model_path)
    if Path(model_path).exists():
        model_path = str(Path(model_path).resolve())
    elif model_path.startswith(("/", ".")) or "/final" in model_path:
        raise FileNotFoundError(f"model {model_path} not found: train it first (python -m numlearn.train with "
                                "the same experiment/model/loss/seed) or pass model_path=<dir or hub name>")
    if Path(model_path).is_dir() and (bad := damaged_weights(model_path)):
        raise ValueError(f"model {model_path}: damaged weights: {'; '.join(bad)}; retrain the run (python -m "
                         "numlearn.train with the same overrides resumes from its last checkpoint) or copy it again")
    return model_path


def _teacher_forced(tcfg, tf_records, backend, model_path: str) -> dict:
    """Teacher-forced digit metrics on the configured solutions, after every generation. The hf backend's loaded
    model is reused where it is; another backend (vLLM) holds no torch module, so it is closed first (its GPU
    memory released) and the model loads on ``eval.teacher_forced.device`` (null: the GPU where there is one)."""
    from .teacher_forced import measure, tf_device

    t0 = time.time()
    if hf := backend.name == "hf":  # its model is already loaded, on its own device
        out = measure(model_path, tcfg, tf_records, model=backend.model, tokenizer=backend.tokenizer)
    else:
        backend.close()
        out = measure(model_path, tcfg, tf_records, device=tf_device(tcfg))
    log.info(f"teacher forced on {out.get('n_examples', 0)} {tcfg.source} solutions"
             + ("" if hf else f" ({out.get('device')})") + ": "
             + ", ".join(f"{k}={out[k]:.4f}" for k in ("digit_acc", "digit_nll", "digit_entropy") if k in out)
             + f" ({time.time() - t0:.1f}s)")
    return out


@dataclass(frozen=True)
class _Generated:
    """One benchmark x mode whose generations are complete: what its result file is written from."""

    name: str
    info: dict
    mode: str
    sampling: object
    records: list
    gen_info: dict
    wall_seconds: float


def _generate(ev: _Evaluation, name: str, problems, info: dict, backend) -> list[_Generated]:
    """Generate (or resume) and score each mode of one benchmark; every problem answered exactly once."""
    from .backends import SamplingConfig
    from .runner import EvalTask, read_jsonl, run_task
    from .spec import BenchmarkSpec

    ecfg = ev.cfg.eval
    spec = BenchmarkSpec.from_config(ecfg.benchmarks[name])
    max_new = spec.max_new_tokens
    if ecfg.get("max_new_tokens_cap"):
        max_new = min(max_new, int(ecfg.max_new_tokens_cap))
    sampling = SamplingConfig(max_new_tokens=max_new, temperature=float(ecfg.temperature),
                              top_p=float(ecfg.top_p), stop=tuple(ecfg.stop))
    done = []
    for mode in spec.modes(ecfg.modes):
        out = ev.eval_dir / name / mode
        t0 = time.time()
        gen_info = run_task(problems, backend, EvalTask(
            spec, mode, sampling, out / "generations.jsonl", pot_timeout_s=float(ecfg.pot_timeout_s),
            force_choice_letter=bool(ecfg.force_choice_letter), symbolic_math=bool(ecfg.symbolic_math),
            chunk_size=max(int(ecfg.batch_size) * 2, 16), protocol=ev.protocol,
            allow_unsafe_exec=ev.sandbox["allow_unsafe_exec"], generation_key=generation_key(ev.model_key, sampling),
            program_workers=int(ecfg.get("program_workers") or os.cpu_count() or 1)))
        wanted = {p.id for p in problems}
        recs = [r for r in read_jsonl(out / "generations.jsonl")[0] if r["id"] in wanted]
        if len(recs) != len(problems):  # every problem answered exactly once, or no result
            raise RuntimeError(f"{out / 'generations.jsonl'} holds {len(recs)} of the {len(problems)} problems of "
                               f"{name}; re-run the same command to complete it")
        done.append(_Generated(name, info, mode, sampling, recs, gen_info, round(time.time() - t0, 2)))
        log.info(f"{name}/{mode}: generated ({gen_info['n_resumed']} resumed)")
    return done


def _write_result(ev: _Evaluation, g: _Generated, backend_described: dict) -> Path:
    """The result file of one generated benchmark x mode (with the evaluation's teacher-forced metrics)."""
    from numlearn.records import ResultRecord, result_path

    from .metrics import METRIC_NOTES
    from .results import result_fields
    from .spec import BenchmarkSpec

    ecfg = ev.cfg.eval
    spec = BenchmarkSpec.from_config(ecfg.benchmarks[g.name])
    fields = result_fields(g.records, spec.answer)
    metrics = fields["metrics"]
    result = ResultRecord(
        benchmark=g.info, mode=g.mode, protocol=ev.protocol, run=ev.run_meta, **fields,
        config=OmegaConf.to_container(ev.cfg, resolve=True), teacher_forced=ev.teacher_forced,
        extra={"n": metrics["n"], "metric_notes": METRIC_NOTES, "model_path": ev.model_path,
               "backend": backend_described, "sampling": g.sampling.as_dict(),
               "pot_timeout_s": float(ecfg.pot_timeout_s), "sandbox": ev.sandbox, "generation": g.gen_info,
               "wall_seconds": g.wall_seconds, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               **ev.provenance})
    path = result_path(ev.eval_dir, g.name, g.mode)
    result.write(path)
    nd = metrics.get("numerical_distance")
    log.info(f"{g.name}/{g.mode}: accuracy={metrics['accuracy']:.4f} n={metrics['n']}"
             + (f" numerical_distance={nd:.4f}" if nd is not None else "")
             + f" ({g.gen_info['n_resumed']} resumed) -> {path}")
    return path


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False


def generation_key(model_key: dict, sampling) -> str:
    return json.dumps({**model_key, "sampling": sampling.as_dict()}, sort_keys=True)
