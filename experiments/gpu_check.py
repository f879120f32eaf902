"""The GPU check behind experiments/gpu_check.sh: does the paper-scale path run, and what does the
numeric term cost at the paper model's shapes? One JSON summary.

    bash experiments/gpu_check.sh               # on one H100/H200, <= 8 minutes, nothing downloaded
    bash experiments/gpu_check.sh --dry-run     # on a CPU: the plan, every file and import, 2 steps of a shrunken model

Steps (each a real run of the project's code):
1. long training records from GSM8K train (several worked solutions per example, ~1,400 tokens with
   the Qwen2.5 tokenizer), so the batches are at the paper's max_length 1500;
2. per loss (MLE, then DEL at the Qwen2.5-1.5B row's effective weight 1.28):
   ``accelerate launch --config_file experiments/accelerate/fsdp_4gpu.yaml --num_processes 1 -m numlearn.train
   experiment=gpu_check`` -- the Qwen2.5-1.5B architecture from scratch, the real tokenizer (V = 151,665),
   bf16, the fused linear loss (train.fused_linear_loss=auto), 40 steps of 4 x <=1500 tokens;
   tokens/s over the steps after the first logging interval (compilation and allocator warm-up
   excluded), peak GPU memory of training (run.json);
3. generation with the hf backend on 64 GSM8K test prompts (the evaluation's prompt format) from
   the DEL run's final/ model: prompts/s and tokens/s;
4. the loss stage alone at the same head (experiments/bench_linear_loss.py --device cuda, bf16, 4 x 1500): HF's
   default against the fused MLE / DEL, grad W summed in fp32 and in bf16 -- time and peak memory (issue 45).
Goal (docs/paper-scale.md): the DEL term costs < 3 % time and < 2 % peak memory over MLE at this scale.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMPORTS = ("torch", "transformers", "accelerate", "safetensors", "tokenizers", "hydra", "omegaconf", "numlearn",
           "numlearn.losses", "numlearn.training.run", "numlearn.evaluation.backends.hf_backend")
SHRINK = ["model.config.hidden_size=64", "model.config.intermediate_size=128", "model.config.num_hidden_layers=2",
          "model.config.num_attention_heads=4", "model.config.num_key_value_heads=2", "model.dtype=float32",
          "train.max_steps=2", "train.logging_steps=1", "train.max_length=256", "train.per_device_train_batch_size=2",
          "train.gradient_checkpointing=false"]
GOALS = {"time": 0.03, "memory": 0.02}


def _first_existing(*cands: Path) -> Path | None:
    return next((c for c in cands if c.exists()), None)


def plan(a) -> dict:
    """Every file and import the check needs, resolved (and refused, with the fix, when missing)."""
    assets = Path(os.environ.get("NUMLEARN_ASSETS_DIR") or _first_existing(REPO / "assets", REPO.parent / "shared" / "assets")
                  or REPO / "assets")
    data = Path(os.environ.get("NUMLEARN_DATA_DIR") or _first_existing(REPO / "data", REPO.parent / "shared" / "data")
                or REPO / "data")
    p = {
        "accelerate_config": REPO / "experiments" / "accelerate" / ("fsdp_2cpu.yaml" if a.dry_run else "fsdp_4gpu.yaml"),
        "tokenizer": assets / "tokenizers" / "qwen2.5",
        "gsm8k_train": data / "train" / "gsm8k" / "train.jsonl",
        "gsm8k_test": data / "benchmarks" / "gsm8k" / "gsm8k.jsonl",
        "experiment": REPO / "conf" / "experiment" / "gpu_check.yaml",
        "model_config": REPO / "conf" / "model" / "qwen2.5-1.5b-scratch.yaml",
    }
    missing = [f"{k}: {v}" for k, v in p.items() if not v.exists()]
    bad_imports = []
    for mod in IMPORTS:
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 -- reported, then refused
            bad_imports.append(f"{mod}: {type(e).__name__}: {e}")
    if missing or bad_imports:
        raise SystemExit("gpu_check: cannot run --\n  " + "\n  ".join(missing + bad_imports) +
                         "\nfix: `make data assets` (or NUMLEARN_DATA_DIR / NUMLEARN_ASSETS_DIR), and the wheels in "
                         "experiments/gpu_check.sh's WHEELS folder for hydra-core/omegaconf")
    import torch

    if not a.dry_run and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device (use --dry-run on a CPU)")
    return {k: str(v) for k, v in p.items()} | {"data_root": str(data)}


def long_records(train_file: Path, tokenizer_dir: Path, out: Path, n: int, target_tokens: int) -> dict:
    """Training examples of ~target_tokens: a GSM8K question whose response is its own worked solution
    followed by the next problems' questions and solutions (real text and real numbers, paper length)."""
    from transformers import AutoTokenizer

    from numlearn.data.sources import load_local

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    recs = load_local(train_file, None)
    rows, i, lengths = [], 0, []
    while len(rows) < n and i < len(recs):
        inst, parts, length = recs[i]["instruction"], [recs[i]["output"]], 0
        length = len(tok(inst + parts[0])["input_ids"])
        j = i + 1
        while j < len(recs) and length < target_tokens:
            extra = f"\n\nNext problem: {recs[j]['instruction']}\n{recs[j]['output']}"
            n_extra = len(tok(extra)["input_ids"])
            if length + n_extra > target_tokens:
                break
            parts.append(extra)
            length += n_extra
            j += 1
        rows.append({"instruction": inst, "output": "".join(parts)})
        lengths.append(length)
        i = j
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"file": str(out), "n": len(rows), "mean_tokens": sum(lengths) / max(len(lengths), 1),
            "max_tokens": max(lengths, default=0)}


def train_one(a, p: dict, loss: str, records: str, out_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", p["accelerate_config"], "--num_processes", "1",
           "-m", "numlearn.train", "experiment=gpu_check", f"loss={loss}", f"paths.output_dir={out_dir}",
           f"paths.assets_dir={Path(p['tokenizer']).parent.parent}", f"data.files=[{records}]",
           f"train.max_steps={a.steps}", "force=true"]  # always train: a skipped, already complete run has no timing
    if a.dry_run:
        cmd += SHRINK
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=a.timeout)
    wall = time.time() - t0
    log = out_dir / f"{loss}.log"
    log.write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    if r.returncode != 0:
        raise SystemExit(f"gpu_check: training {loss} failed (exit {r.returncode}); log: {log}\n{r.stderr[-3000:]}")
    (run_json,) = [x for x in out_dir.rglob("run.json") if x.parent.parent.parent.name == loss]
    meta = json.loads(run_json.read_text())
    logs = [json.loads(x) for x in (run_json.parent / "metrics.jsonl").read_text().splitlines() if x.strip()]
    logs = [m for m in logs if "loss" in m and "num_input_tokens_seen" in m]
    first, last = (logs[0], logs[-1]) if len(logs) > 1 else (None, None)
    steady = ({"from_step": first["step"], "to_step": last["step"],
               "tokens": last["num_input_tokens_seen"] - first["num_input_tokens_seen"],
               "seconds": round(last["time"] - first["time"], 3)} if first else None)
    if steady and steady["seconds"] > 0:
        steady["tokens_per_s"] = round(steady["tokens"] / steady["seconds"], 1)
        steady["seconds_per_step"] = round(steady["seconds"] / (last["step"] - first["step"]), 4)
    return {"loss": loss, "alpha": meta.get("alpha"), "aux_effective_weight": meta.get("aux_effective_weight"),
            "fused_linear_loss": meta.get("fused_linear_loss"), "world_size": meta.get("world_size"),
            "n_params": meta.get("n_params"), "global_step": meta.get("global_step"),
            "launch_wall_s": round(wall, 1), "train_runtime_s": meta.get("train_runtime_s"),
            "steady": steady, "peak_gpu_memory": meta.get("peak_gpu_memory"),
            "last_log": {k: last.get(k) for k in ("loss", "loss/ce", "loss/aux")} if last else None,
            "run_dir": str(run_json.parent)}


def generate(a, p: dict, model_dir: str) -> dict:
    import torch
    from omegaconf import OmegaConf

    from numlearn.data.prompts import POT_SUFFIX, format_prompt
    from numlearn.evaluation.backends import SamplingConfig, get_backend
    from numlearn.evaluation.benchmarks import load_benchmark

    # the evaluation's own loader and PoT prompt (runner.first_prompt), the first N GSM8K test problems
    bcfg = OmegaConf.load(REPO / "conf" / "eval" / "benchmark" / "gsm8k.yaml")
    problems, _ = load_benchmark(bcfg, Path(p["data_root"]), Path(a.work) / "cache", limit=a.prompts)
    prompts = [format_prompt(q.question + POT_SUFFIX) for q in problems]
    backend = get_backend("hf", model_dir, dtype="float32" if a.dry_run else "bfloat16", batch_size=a.prompts)
    sampling = SamplingConfig(max_new_tokens=16 if a.dry_run else a.max_new_tokens, stop=("\n\n\n",))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.time()
    outs = backend.generate(prompts, sampling)
    secs = time.time() - t0
    st = backend.stats
    return {"backend": "hf", "prompts": len(prompts), "max_new_tokens": sampling.max_new_tokens,
            "generated_tokens": st["generated_tokens"], "seconds": round(secs, 2),
            "tokens_per_s": round(st["generated_tokens"] / st["generate_seconds"], 1) if st["generate_seconds"] else None,
            "prompts_per_s": round(len(prompts) / secs, 2), "nonempty_completions": sum(bool(o) for o in outs)}


def loss_stage(a, work: Path) -> dict:
    """The loss stage alone at Qwen2.5-1.5B's head (H = 1,536, V = 151,665), bf16, on the device
    (experiments/bench_linear_loss.py, each variant in its own process): HF's default (full logits, fp32 CE), and
    the fused linear MLE / DEL with grad W summed in fp32 (default) and in the weight's dtype, and Liger-Kernel's
    fused linear CE where it installs (gpu_check.sh, from the carried wheel; on CPU its row says why it cannot
    run). Time per fwd+bwd (best of 3) and the allocator's peak beyond the inputs and the returned gradients, in
    fp32 chunk blocks (issue 45's goal: <= 1.2)."""
    out = {}
    for acc, variants in (("float32", "hf_default,linear_ce,linear_del,liger_flce"),
                          ("weight", "linear_ce,linear_del")):
        f = work / f"loss_stage_{acc}.json"
        cmd = [sys.executable, str(REPO / "experiments" / "bench_linear_loss.py"), "--variants", variants,
               "--dtype", "float32" if a.dry_run else "bfloat16", "--grad-accumulation", acc, "--json", str(f)]
        cmd += (["--device", "cpu", "--shapes", "1x64", "--hidden", "64", "--vocab", "4000", "--chunk", "32"]
                if a.dry_run else ["--device", "cuda", "--shapes", "4x1500", "--chunk", "1024", "--reps", "3"])
        t0 = time.time()
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
        out[acc] = {"command": " ".join(cmd[1:]), "rc": r.returncode, "seconds": round(time.time() - t0, 1),
                    "table": r.stdout[-2000:]}
        if r.returncode == 0 and f.exists():
            out[acc]["rows"] = json.loads(f.read_text())["shapes"]
        else:
            out[acc]["stderr"] = r.stderr[-1500:]
    return out


def probe_step(a, p: dict, runs: dict) -> dict:
    """The checkpoint probe (numlearn.probe) on GSM8K test solutions: the authors' released Qwen2.5-1.5B
    against its base where ``--released-dir`` holds both (``released/`` and ``base/``: weights brought with
    the loan), else this check's own DEL run against its MLE run. Then, with released weights, a slice of
    the released study (HF backend: the machine has no vLLM)."""
    import subprocess

    d = a.released_dir
    have = d is not None and (d / "released" / "config.json").is_file() and (d / "base" / "config.json").is_file()
    model, base = (d / "released", d / "base") if have else (Path(runs["del"]["run_dir"]) / "final",
                                                             Path(runs["mle"]["run_dir"]) / "final")
    out = a.work / "probe"
    cmd = [sys.executable, "-m", "numlearn.probe", f"model_path={model}", f"baseline={base}", "datasets=gsm8k",
           f"n={2 if a.dry_run else a.probe_n}", f"out={out}", f"data_dir={p['data_root']}",
           f"batch_size={2 if a.dry_run else 8}", f"n_boot={100 if a.dry_run else 2000}"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    res = {"command": " ".join(cmd), "what": "released vs base" if have else "this check's DEL run vs its MLE run",
           "rc": r.returncode, "seconds": round(time.time() - t0, 1)}
    if r.returncode == 0:
        cmp = json.loads(next(out.glob("*__vs__*/compare.json")).read_text())["datasets"]["gsm8k"]["difference"]
        res["difference"] = {k: cmp[k] for k in ("digit_logit", "gap", "correct", "nll", "lowers_code")}
    else:
        res["stderr"] = r.stderr[-1500:]
    if have:
        cmd = [sys.executable, "-m", "numlearn.pipeline", "released", "--models", "qwen2.5-1.5b", "--with-base",
               "--hub-map", f"Zzh-tju/qwen2.5-1.5B={d / 'released'}", "--hub-map", f"Qwen/Qwen2.5-1.5B={d / 'base'}",
               "--store", str(a.work / "store"), "--outputs", str(a.work / "released"), "--out",
               str(a.work / "released_table"), "--live", "off"]
        for o in ("eval.backend=hf", "eval.tensor_parallel_size=1", f"eval.limit={a.released_limit}",
                  f"paths.data_dir={p['data_root']}"):
            cmd += ["--override", o]
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        res["released_slice"] = {"command": " ".join(cmd), "rc": r.returncode, "seconds": round(time.time() - t0, 1),
                                 "table": r.stdout[-3000:] if r.returncode == 0 else None,
                                 "stderr": r.stderr[-1500:] if r.returncode else None}
    return res


class Summary(dict):
    """The check's summary.json, written after every step (issue 60 item 8): a step that times out or fails is
    recorded as such, and what was measured before it is kept."""

    def __init__(self, path: Path, **fields):
        super().__init__(fields, steps={})
        self.path = path

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self, indent=2, default=str) + "\n")

    def step(self, name: str, fn, *needs: str):
        """Run ``fn()`` as step ``name`` (skipped when a step it ``needs`` did not end ok), record its result or
        why it has none, write the file; the result, or None."""
        if bad := [n for n in needs if self["steps"].get(n) != "ok"]:
            self["steps"][name] = f"skipped: {', '.join(bad)} did not end ok"
            self.save()
            return None
        t0 = time.time()
        try:
            value = fn()
        except subprocess.TimeoutExpired as e:
            self["steps"][name] = f"timed out after {e.timeout} s"
            self[name] = {"status": "timed out", "timeout_s": e.timeout, "command": " ".join(map(str, e.cmd))[:2000]}
            value = None
        except (SystemExit, Exception) as e:  # noqa: BLE001 -- a failed step is recorded; the next ones still run
            self["steps"][name] = "failed"
            self[name] = {"status": "failed", "error": str(e)[-3000:]}
            value = None
        else:
            self["steps"][name] = "ok"
            self[name] = value
        self[name + "_s"] = round(time.time() - t0, 1)
        self.save()
        print(f"[{name}] {self['steps'][name]}: {json.dumps(self[name], default=str)[:2000]}", flush=True)
        return value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU: plan, checks, 2 steps of a shrunken model")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "gpu_check")
    ap.add_argument("--work", type=Path, default=REPO / "outputs" / "gpu_check")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--timeout", type=int, default=210, help="seconds per training launch")
    ap.add_argument("--released-dir", type=Path, default=None,
                    help="local copies of Zzh-tju/qwen2.5-1.5B (released/) and Qwen/Qwen2.5-1.5B (base/): the probe "
                         "compares them and a slice of the released study runs (optional)")
    ap.add_argument("--probe-n", type=int, default=200, help="GSM8K test solutions the probe reads")
    ap.add_argument("--released-limit", type=int, default=16, help="problems per benchmark in the released slice")
    a = ap.parse_args(argv)
    if a.dry_run:
        a.steps, a.prompts = 2, 4
    t_start = time.time()
    p = plan(a)
    print("gpu_check plan:", json.dumps({"dry_run": a.dry_run, "steps": a.steps, "prompts": a.prompts, **p}, indent=2),
          flush=True)
    work = a.work / ("dry_run" if a.dry_run else "gpu")
    summary = Summary((a.out if not a.dry_run else work) / "summary.json", **_header(a))
    summary.save()
    recs = summary.step("records", lambda: long_records(
        Path(p["gsm8k_train"]), Path(p["tokenizer"]), work / "long_records.jsonl", n=8 if a.dry_run else 4 * a.steps + 8,
        target_tokens=200 if a.dry_run else 1400))
    runs = {}
    for loss in ("mle", "del"):
        runs[loss] = summary.step(f"train_{loss}", lambda loss=loss: train_one(a, p, loss, recs["file"], work / "runs"),
                                  "records")
    summary.step("generation", lambda: generate(a, p, str(Path(runs["del"]["run_dir"]) / "final")), "train_del")
    summary.step("loss_stage", lambda: loss_stage(a, work))
    summary.step("probe", lambda: probe_step(a, p, runs), "train_mle", "train_del")
    summary["train"] = {k: v for k, v in runs.items() if v is not None}
    summary["del_cost_over_mle"] = cost = _cost(runs)
    summary["goals_met"] = {k: (cost[k] < GOALS[k]) for k in cost} if not a.dry_run else "not measured in a dry run"
    summary["wall_s"] = round(time.time() - t_start, 1)
    summary.save()
    failed = [k for k, v in summary["steps"].items() if v != "ok"]
    print(f"gpu_check: {'dry run ' if a.dry_run else ''}done in {summary['wall_s']} s -> {summary.path}; "
          f"DEL over MLE: {cost}" + (f"; not ok: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


def _header(a) -> dict:
    """What the summary records before any step: the check, the device, the packages, the provenance."""
    import accelerate
    import torch
    import transformers

    head = {"check": "gpu_check", "dry_run": a.dry_run,
            "command": "bash experiments/gpu_check.sh" + (" --dry-run" if a.dry_run else ""),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu",
            "packages": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "accelerate": accelerate.__version__}, "goals": GOALS}
    try:
        from numlearn.provenance import provenance

        head.update(provenance())
    except Exception:  # noqa: BLE001 -- provenance is best effort on a bare machine
        pass
    return head


def _cost(runs: dict) -> dict:
    """DEL's time and peak-memory cost over MLE, from the two trainings where both were measured."""
    cost = {}
    m, d = runs.get("mle"), runs.get("del")
    if not (m and d):
        return cost
    if m["steady"] and d["steady"] and m["steady"].get("tokens_per_s") and d["steady"].get("tokens_per_s"):
        cost["time"] = round(m["steady"]["tokens_per_s"] / d["steady"]["tokens_per_s"] - 1, 4)
    if m["peak_gpu_memory"] and d["peak_gpu_memory"]:
        cost["memory"] = round(d["peak_gpu_memory"]["allocated_bytes"] / m["peak_gpu_memory"]["allocated_bytes"] - 1, 4)
    return cost


if __name__ == "__main__":
    sys.exit(main())
