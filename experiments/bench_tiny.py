"""Where the time of a tiny Table 1 run goes, and how fast it is: ``make bench-tiny``.

Measured in one process, one after the other (ratios from the same run; the machine is noisy):

1. the training step of the configured preset (``experiment=table1_tiny``), phase by phase
   (collate, forward, loss, backward, optimizer) in a plain loop over its real batches: packed
   (the preset) and padded (``train.packing=false``: the same computation, more positions), bf16
   autocast, one process on every core, and JOBS one-thread processes side by side;
2. the previous preset (recipe 1: 4 layers, every problem also as PoT, padded batches, 1,500 steps)
   the same way, for the per-run comparison;
3. both presets through ``python -m numlearn.train`` (the HF Trainer, our loss bridge, logging):
   steps/s, and the seconds a run spends outside the training loop;
4. sandboxed PoT programs per second, one at a time and ``eval.program_workers`` at a time;
5. a whole run (training + its programs) of each preset, estimated from 1-4.

Writes ``results/bench_tiny.json`` and prints the numbers of the previous committed file beside
this run's (a different run: read those ratios as indicative only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "bench_tiny.json"


def _cfg(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose("config", overrides=["experiment=table1_tiny", *overrides])


# recipe 1, the preset before the calibrated one (results/archive/README.md)
RECIPE1 = ["model.config.num_hidden_layers=4", "data.pot=true", "train.packing=false", "train.max_steps=1500"]


def plain_loop(cfg, steps: int, bf16: bool, sampling: str = "random", threads: int | None = None,
               compile_model: bool = False) -> dict:
    from numlearn.data.collate import PackCollator, PadCollator, tokenize_records
    from numlearn.training.model import build_model
    from numlearn.training.run import plan_run

    if threads:
        torch.set_num_threads(threads)
    plan = plan_run(cfg)
    feats, _ = tokenize_records(plan.records(), plan.tokenizer, int(cfg.train.max_length), plan.template,
                                cfg.data.get("boundary", "split"))
    with tempfile.TemporaryDirectory() as cache:
        model = build_model(cfg.model, plan.tokenizer, cache, seed=0)
    bs = int(cfg.train.per_device_train_batch_size)
    packing = cfg.train.get("packing")
    coll = (PackCollator(plan.tokenizer.pad_token_id, 2 if packing is True else int(packing)) if packing else
            PadCollator(plan.tokenizer.pad_token_id, with_attention_mask=bool(cfg.train.get("attention_mask", True))))
    kw = {"use_cache": False}  # as the Trainer runs the model
    fwd = torch.compile(model, dynamic=True) if compile_model else model
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg.train.learning_rate))
    if sampling == "group_by_length":
        from transformers.trainer_pt_utils import LengthGroupedSampler

        order = list(LengthGroupedSampler(bs, dataset=feats, model_input_name="input_ids",
                                          generator=torch.Generator().manual_seed(0)))
        # the sampler puts the longest batch first; skip it so the timed steps are typical ones
        order = order[bs:] + order[:bs]
    else:
        order = torch.randperm(len(feats), generator=torch.Generator().manual_seed(0)).tolist()
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    phases = dict.fromkeys(("collate", "forward", "loss", "backward", "optimizer"), 0.0)
    real = padded = 0
    warm = 5
    t_start = time.perf_counter()
    for i in range(warm + steps):
        t0 = time.perf_counter()
        b = coll([feats[j] for j in order[i * bs:(i + 1) * bs]])
        t1 = time.perf_counter()
        with ctx():
            logits = fwd(input_ids=b["input_ids"], position_ids=b.get("position_ids"), **kw).logits
        t2 = time.perf_counter()
        loss = plan.loss_fn(logits.float(), b["labels"]).loss
        t3 = time.perf_counter()
        loss.backward()
        t4 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        if i == warm - 1:
            warmup_s = t5 - t_start  # with torch.compile: the compilation
        if i >= warm:
            for k, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                phases[k] += dt
            real += sum(len(feats[j]["input_ids"]) for j in order[i * bs:(i + 1) * bs])
            padded += b["input_ids"].numel()
    total = sum(phases.values())
    return {"steps_per_s": steps / total, "tokens_per_s": real / total, "pad_share": 1 - real / padded,
            "ms_per_step": {k: round(1000 * v / steps, 2) for k, v in phases.items()}, "warmup_s": round(warmup_s, 1)}


def concurrent_loops(a, n: int) -> dict:
    """``n`` one-configured-thread plain loops at once (separate processes): their summed steps/s."""
    cmd = [sys.executable, __file__, "--loop-only", "--steps", str(a.steps), "--loss", a.loss]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(n)]
    rates = [json.loads(p.communicate()[0].strip().splitlines()[-1])["steps_per_s"] for p in procs]
    return {"processes": n, "steps_per_s_total": sum(rates)}


def trainer_run(loss: str, steps: int, overrides=()) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "numlearn.train", "experiment=table1_tiny", f"loss={loss}", *overrides,
               f"run_dir={d}/run", f"train.max_steps={steps}", f"train.save_steps={steps * 10}",
               f"train.logging_steps={steps}", "force=true"]
        t = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        recs = [json.loads(x) for x in (Path(d) / "run" / "metrics.jsonl").read_text().splitlines()]
    rt = next(r for r in recs if "train_runtime" in r)
    return {"steps_per_s": steps / rt["train_runtime"], "process_wall_s": wall,
            "outside_training_s": wall - rt["train_runtime"]}


def programs(workers_list, n: int = 96) -> dict:
    from numlearn.data.synthetic import generate
    from numlearn.evaluation.runner import ProgramExecutor

    codes = [p.pot for p in generate("test", n, seed=0)]
    out = {}
    for w in workers_list:
        with ProgramExecutor(5.0, False, w) as ex:
            ex.run(codes[:4])
            t = time.perf_counter()
            runs = ex.run(codes)
            out[w] = n / (time.perf_counter() - t)
        if not all(r["ok"] for r in runs):
            raise RuntimeError(f"a synthetic program failed with {w} workers: {next(r for r in runs if not r['ok'])}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--loss", default="del")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--loop-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    base = [f"loss={a.loss}", "run_dir=/tmp/numlearn-bench-tiny"]
    if a.loop_only:  # one of concurrent_loops' processes
        cfg = _cfg(base)
        print(json.dumps(plain_loop(cfg, a.steps, bf16=False, threads=int(cfg.train.get("torch_threads") or 1))))
        return 0
    from numlearn.provenance import environment, git_info

    cfg, cfg_padded, cfg_r1 = _cfg(base), _cfg([*base, "train.packing=false"]), _cfg([*base, *RECIPE1])
    prev = None
    with contextlib.suppress(subprocess.CalledProcessError, json.JSONDecodeError):
        prev = json.loads(subprocess.run(["git", "show", f"HEAD:{OUT.relative_to(REPO)}"], cwd=REPO, check=True,
                                         capture_output=True, text=True).stdout)
    print(f"bench-tiny: loss={a.loss}, {a.steps} steps, batch {cfg.train.per_device_train_batch_size}, "
          f"torch threads {torch.get_num_threads()}", flush=True)
    threads = int(cfg.train.get("torch_threads") or torch.get_num_threads())
    cores = os.cpu_count() or 1
    packed = plain_loop(cfg, a.steps, bf16=False, threads=threads)
    padded = plain_loop(cfg_padded, a.steps, bf16=False, threads=threads)
    recipe1 = plain_loop(cfg_r1, a.steps, bf16=False, threads=threads)
    all_cores = plain_loop(cfg, a.steps, bf16=False, threads=cores)
    jobs = 2 * max(cores // threads, 1)  # the Makefile's JOBS=4 on 2 cores
    concurrent = concurrent_loops(a, jobs) if cores // threads > 1 else None
    bf16 = plain_loop(cfg, a.steps, bf16=True, threads=threads)
    compiled = plain_loop(cfg, a.steps, bf16=False, threads=threads, compile_model=True)
    trainer = trainer_run(a.loss, max(a.steps * 3, 150))
    trainer_r1 = trainer_run(a.loss, max(a.steps * 3, 150), RECIPE1)
    workers = int(cfg.eval.get("program_workers") or os.cpu_count() or 1)
    progs = programs(sorted({1, workers}))
    # A whole run on one core: the preset's steps at the Trainer's rate, the time outside the loop,
    # and the evaluation's PoT programs (2 per PoT generation: strict + official wrap), which is
    # what evaluation costs beyond ~1 s of CoT generation per split.
    n_programs = 2 * sum(int(b.generator.n) for b in cfg.eval.benchmarks.values())

    def per_run(c, t):
        return int(c.train.max_steps) / t["steps_per_s"] + t["outside_training_s"] + n_programs / progs[workers]

    run_now, run_r1 = per_run(cfg, trainer), per_run(cfg_r1, trainer_r1)
    res = {
        "git": git_info(), "environment": environment(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loss": a.loss, "steps": a.steps, "threads": threads, "cores": cores,
        "plain_loop_packed": packed, "plain_loop_padded": padded, "plain_loop_recipe1": recipe1,
        "plain_loop_all_cores": all_cores, "concurrent_processes": concurrent, "plain_loop_bf16_autocast": bf16,
        "plain_loop_torch_compile": compiled, "trainer": trainer, "trainer_recipe1": trainer_r1,
        "trainer_overhead": packed["steps_per_s"] / trainer["steps_per_s"],
        "programs_per_s": {str(k): v for k, v in progs.items()}, "program_workers": workers,
        "run_estimate_s": {"configured": run_now, "recipe1": run_r1},
        "packing_speedup": packed["steps_per_s"] / padded["steps_per_s"],
        "run_speedup_vs_recipe1": run_r1 / run_now,
    }
    ms = lambda r: r["ms_per_step"]  # noqa: E731
    print(f"training step, configured preset (packed, plain loop, fp32, {threads} thread(s)): "
          f"{packed['steps_per_s']:.2f} steps/s, {packed['tokens_per_s']:.0f} tokens/s, "
          f"{100 * packed['pad_share']:.1f} % pad positions; ms/step {ms(packed)}")
    print(f"  padded (train.packing=false, the same computation): {padded['steps_per_s']:.2f} steps/s, "
          f"{100 * padded['pad_share']:.1f} % pad -> packing {res['packing_speedup']:.2f}x")
    print(f"  recipe 1 (4 layers, padded): {recipe1['steps_per_s']:.2f} steps/s, {recipe1['tokens_per_s']:.0f} tokens/s; "
          f"ms/step {ms(recipe1)}")
    print(f"  one process on all {cores} cores: {all_cores['steps_per_s']:.2f} steps/s"
          + (f"; {concurrent['processes']} one-thread processes at once: {concurrent['steps_per_s_total']:.2f} "
             "steps/s in total" if concurrent else ""))
    print(f"  bf16 autocast: {bf16['steps_per_s']:.2f} steps/s ({bf16['steps_per_s'] / packed['steps_per_s']:.2f}x; "
          "not used: the numerics change)")
    print(f"  torch.compile (inductor, dynamic shapes): {compiled['steps_per_s']:.2f} steps/s "
          f"({compiled['steps_per_s'] / packed['steps_per_s']:.2f}x) after {compiled['warmup_s']:.0f} s of compilation "
          f"(5 steps: {packed['warmup_s']:.1f} s uncompiled); over the preset's {int(cfg.train.max_steps)} steps "
          f"{int(cfg.train.max_steps) / compiled['steps_per_s'] + compiled['warmup_s']:.0f} s against "
          f"{int(cfg.train.max_steps) / packed['steps_per_s'] + packed['warmup_s']:.0f} s")
    print(f"  through numlearn.train (HF Trainer): {trainer['steps_per_s']:.2f} steps/s (plain loop / Trainer = "
          f"{res['trainer_overhead']:.2f}), {trainer['outside_training_s']:.1f} s per run outside the loop; "
          f"recipe 1: {trainer_r1['steps_per_s']:.2f} steps/s, {trainer_r1['outside_training_s']:.1f} s")
    print("PoT programs: " + ", ".join(f"{k} at a time {v:.1f}/s" for k, v in progs.items())
          + (f" ({progs[workers] / progs[1]:.2f}x)" if workers != 1 else ""))
    print(f"one run on one core, estimated (steps + start-up + {n_programs} programs): configured "
          f"{int(cfg.train.max_steps)} steps {run_now:.0f} s, recipe 1 {int(cfg_r1.train.max_steps)} steps "
          f"{run_r1:.0f} s -> {res['run_speedup_vs_recipe1']:.2f}x")
    if prev:
        pc = prev.get("git", {}).get("commit", "?")[:10]
        pt = prev.get("plain_loop_packed") or prev.get("plain_loop_fp32") or {}
        print(f"previous committed bench ({pc}, another run): Trainer {prev['trainer']['steps_per_s']:.2f} -> "
              f"{trainer['steps_per_s']:.2f} steps/s; plain-loop tokens/s {pt.get('tokens_per_s', float('nan')):.0f} -> "
              f"{packed['tokens_per_s']:.0f}")
    if not a.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
