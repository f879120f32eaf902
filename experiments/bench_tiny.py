"""Where the time of a tiny Table 1 run goes, and how fast it is: ``make bench-tiny``.

Measured in one process, one after the other (ratios from the same run; the machine is noisy):

1. the training step, phase by phase (collate, forward, loss, backward, optimizer) in a plain
   loop over the embedded default's real batches: random batches, length-grouped batches
   (``train.sampling=group_by_length``), bf16 autocast;
2. the same steps through ``python -m numlearn.train`` (the HF Trainer, our loss bridge,
   logging): its steps/s against the plain loop is the Trainer's overhead;
3. the share of pad tokens in the batches;
4. sandboxed PoT programs per second, one at a time and ``eval.program_workers`` at a time;
5. one seed of Table 1 (four rows, train + evaluate) estimated from 1-4, against the same
   estimate with the previous settings (one process on every core, programs one at a time).

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


def plain_loop(cfg, steps: int, bf16: bool, sampling: str = "random", threads: int | None = None) -> dict:
    from numlearn.data.collate import PadCollator, tokenize_records
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
    coll = PadCollator(plan.tokenizer.pad_token_id, with_attention_mask=bool(cfg.train.get("attention_mask", True)))
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
    for i in range(warm + steps):
        t0 = time.perf_counter()
        b = coll([feats[j] for j in order[i * bs:(i + 1) * bs]])
        t1 = time.perf_counter()
        with ctx():
            logits = model(input_ids=b["input_ids"]).logits
        t2 = time.perf_counter()
        loss = plan.loss_fn(logits.float(), b["labels"]).loss
        t3 = time.perf_counter()
        loss.backward()
        t4 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        if i >= warm:
            for k, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                phases[k] += dt
            real += sum(len(feats[j]["input_ids"]) for j in order[i * bs:(i + 1) * bs])
            padded += b["input_ids"].numel()
    total = sum(phases.values())
    return {"steps_per_s": steps / total, "tokens_per_s": real / total, "pad_share": 1 - real / padded,
            "ms_per_step": {k: round(1000 * v / steps, 2) for k, v in phases.items()}}


def concurrent_loops(a, n: int) -> dict:
    """``n`` one-configured-thread plain loops at once (separate processes): their summed steps/s."""
    cmd = [sys.executable, __file__, "--loop-only", "--steps", str(a.steps), "--loss", a.loss]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(n)]
    rates = [json.loads(p.communicate()[0].strip().splitlines()[-1])["steps_per_s"] for p in procs]
    return {"processes": n, "steps_per_s_total": sum(rates)}


def trainer_run(loss: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "numlearn.train", "experiment=table1_tiny", f"loss={loss}", f"run_dir={d}/run",
               f"train.max_steps={steps}", f"train.save_steps={steps * 10}", f"train.logging_steps={steps}",
               "data.heldout.n=0", "force=true"]
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
    if a.loop_only:  # one of concurrent_loops' processes
        cfg = _cfg([f"loss={a.loss}", "run_dir=/tmp/numlearn-bench-tiny"])
        print(json.dumps(plain_loop(cfg, a.steps, bf16=False, threads=int(cfg.train.get("torch_threads") or 1))))
        return 0
    from numlearn.provenance import environment, git_info

    cfg = _cfg([f"loss={a.loss}", "run_dir=/tmp/numlearn-bench-tiny"])
    prev = None
    with contextlib.suppress(subprocess.CalledProcessError, json.JSONDecodeError):
        prev = json.loads(subprocess.run(["git", "show", f"HEAD:{OUT.relative_to(REPO)}"], cwd=REPO, check=True,
                                         capture_output=True, text=True).stdout)
    print(f"bench-tiny: loss={a.loss}, {a.steps} steps, batch {cfg.train.per_device_train_batch_size}, "
          f"torch threads {torch.get_num_threads()}", flush=True)
    threads = int(cfg.train.get("torch_threads") or torch.get_num_threads())
    cores = os.cpu_count() or 1
    fp32 = plain_loop(cfg, a.steps, bf16=False, threads=threads)
    all_cores = plain_loop(cfg, a.steps, bf16=False, threads=cores)
    concurrent = concurrent_loops(a, cores // threads) if cores // threads > 1 else None
    bf16 = plain_loop(cfg, a.steps, bf16=True, threads=threads)
    grouped = plain_loop(cfg, a.steps, bf16=False, sampling="group_by_length", threads=threads)
    trainer = trainer_run(a.loss, max(a.steps * 3, 150))
    workers = int(_cfg([]).eval.get("program_workers") or os.cpu_count() or 1)
    progs = programs(sorted({1, workers}))
    # A whole run: the configured steps, plus process start-up, plus evaluation, whose cost is the
    # PoT programs (2 per PoT generation: strict + official wrap; CoT generation takes ~1 s).
    n_steps = int(cfg.train.max_steps)
    n_programs = 2 * sum(int(b.generator.n) for b in cfg.eval.benchmarks.values())
    trainer_share = trainer["steps_per_s"] / fp32["steps_per_s"]  # the Trainer's speed relative to the loop
    # four Table 1 rows: before, one process on every core and programs one at a time; now, the
    # configured thread count with JOBS rows at once and program_workers programs at once
    before = 4 * (n_steps / (all_cores["steps_per_s"] * trainer_share) + trainer["outside_training_s"]
                  + n_programs / progs[1])
    per_row_now = (n_steps / (fp32["steps_per_s"] * trainer_share) + trainer["outside_training_s"]
                   + n_programs / progs[workers])
    speedup_jobs = (concurrent["steps_per_s_total"] / fp32["steps_per_s"]) if concurrent else 1.0
    now = 4 * per_row_now / speedup_jobs
    res = {
        "git": git_info(), "environment": environment(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loss": a.loss, "steps": a.steps,
        "threads": threads, "cores": cores, "plain_loop_fp32": fp32, "plain_loop_all_cores": all_cores,
        "concurrent_processes": concurrent,
        "plain_loop_bf16_autocast": bf16, "plain_loop_group_by_length": grouped,
        "trainer": trainer,
        "trainer_overhead": fp32["steps_per_s"] / trainer["steps_per_s"],
        "programs_per_s": {str(k): v for k, v in progs.items()}, "program_workers": workers,
        "table1_estimate_s": {"one_process_all_cores_programs_serial": before, "configured": now},
    }
    res["table1_speedup"] = before / now
    print(f"training step (plain loop, fp32, {threads} thread(s)): {fp32['steps_per_s']:.2f} steps/s, "
          f"{fp32['tokens_per_s']:.0f} tokens/s, {100 * fp32['pad_share']:.1f} % pad tokens; ms/step {fp32['ms_per_step']}")
    print(f"  one process on all {cores} cores: {all_cores['steps_per_s']:.2f} steps/s"
          + (f"; {concurrent['processes']} processes at once: {concurrent['steps_per_s_total']:.2f} steps/s in total"
             if concurrent else ""))
    print(f"  bf16 autocast: {bf16['steps_per_s']:.2f} steps/s ({bf16['steps_per_s'] / fp32['steps_per_s']:.2f}x)")
    print(f"  length-grouped batches: {grouped['steps_per_s']:.2f} steps/s "
          f"({grouped['steps_per_s'] / fp32['steps_per_s']:.2f}x), {100 * grouped['pad_share']:.1f} % pad tokens")
    print(f"  through numlearn.train (HF Trainer): {trainer['steps_per_s']:.2f} steps/s "
          f"(plain loop / Trainer = {res['trainer_overhead']:.2f}); {trainer['outside_training_s']:.1f} s per run "
          "outside the training loop (start-up, tokenisation, saving)")
    print("PoT programs: " + ", ".join(f"{k} at a time {v:.1f}/s" for k, v in progs.items())
          + (f" ({progs[workers] / progs[1]:.2f}x)" if workers != 1 else ""))
    print(f"Table 1, one seed (4 rows x {n_steps} steps + {n_programs} programs each), estimated: {before:.0f} s as one "
          f"process on all cores with programs one at a time -> {now:.0f} s configured ({res['table1_speedup']:.2f}x)")
    if prev and "table1_estimate_s" in prev:
        pc = prev.get("git", {}).get("commit", "?")[:10]
        print(f"previous committed bench ({pc}, another run): Trainer {prev['trainer']['steps_per_s']:.2f} steps/s -> "
              f"{trainer['steps_per_s']:.2f}; tokens/s {prev['plain_loop_fp32']['tokens_per_s']:.0f} -> "
              f"{fp32['tokens_per_s']:.0f}; Table 1 estimate {prev['table1_estimate_s']['configured']:.0f} s -> {now:.0f} s")
    if not a.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
