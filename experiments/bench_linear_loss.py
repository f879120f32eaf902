"""The loss stage with the LM head, at Qwen2.5-1.5B's shapes (a benchmark, not a test).

    python experiments/bench_linear_loss.py [--shapes 4x1024,4x1500] [--reps 1]   # part of make bench-losses

The loss stage is the head matmul, the loss and their backward: hidden states ``h`` ``[B*T, H]``
(H = 1536) and the head weight ``W`` ``[V, H]`` (V = 151,665) in, ``grad h`` and ``grad W`` out.
Variants, each in its own subprocess (peak RSS is per process):
  * ``hf_default`` -- ``logits = h @ W.T``; ``F.cross_entropy(logits.float())`` (what HF does);
  * ``fused_logits`` -- the same logits, numlearn's DEL on them (one [M, V] gradient buffer);
  * ``linear_ce`` / ``linear_del`` -- ``MLELoss`` / ``DELLoss.from_hidden``: chunked, the
    logits never exist whole.
Peak memory (CPU) is the process's high-water RSS (reset once h and W exist) minus its RSS then (on CUDA, with
``--device cuda``: the allocator's peak since then minus what was allocated), minus the size of
grad W and grad h (every variant ends holding them): the loss stage beyond the inputs, the
parameter and the gradients. Ratios are from this one run.
Goals (issue): linear <= 0.10x HF's peak at 4 x 1500, DEL adds < 1 % over linear CE, time <= 1.10x.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
H, V = 1536, 151_665
VARIANTS = ["hf_default", "fused_logits", "linear_ce", "linear_del"]
# also: floor (the three head products per chunk alone, no loss: what a fused kernel cannot go below),
# linear_del_fused (from_hidden with fused_chain=True), chain_eager / chain_fused (one chunk's elementwise
# chain alone, on a random [chunk, V] fp32 block: the per-chunk time of the two forms), liger_flce (Liger-Kernel's
# fused linear cross-entropy, a Triton kernel: CUDA only; its row says why where it cannot run)
LIGER_PIN = "liger-kernel==0.8.5"  # what make gpu-check-wheels carries to the GPU machine


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def reset_peak() -> bool:
    """Reset the process's RSS high-water mark (Linux: /proc/self/clear_refs), so that building the inputs (a bf16
    head is made through an fp32 copy) does not count as the loss stage's peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_mb() -> float:
    """VmHWM (since the last reset), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmHWM"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(variant: str, B: int, T: int, reps: int, chunk: int, H: int = H, V: int = V, dtype: str = "float32",
        grad_accumulation: str = "float32", device: str = "cpu") -> dict:
    import torch
    import torch.nn.functional as F

    from numlearn.losses import DELLoss, DigitVocab, LinearHead, MLELoss

    g = torch.Generator().manual_seed(0)
    vocab = DigitVocab(tuple(range(15, 25)), 13)  # Qwen2.5's digit ids and "."
    # labels: a number-heavy mix (about a third digits), every position a target
    labels = torch.randint(100, V, (B, T), generator=g)
    digits = torch.rand(B, T, generator=g) < 0.35
    labels[digits] = torch.randint(15, 25, (int(digits.sum()),), generator=g)
    dt = getattr(torch, dtype)
    h = (torch.randn(B * T, H, generator=g) * 0.5).to(device=device, dtype=dt).requires_grad_()
    W = torch.nn.Parameter((torch.randn(V, H, generator=g) * 0.02).to(device=device, dtype=dt))
    labels = labels.to(device)
    cuda = device.startswith("cuda")
    if variant == "linear_del_fused":  # compile the chain before the clock and the peak (one call, both lengths)
        from numlearn.losses import DELLoss as _D

        _D(vocab, alpha=1.28).from_hidden(h.view(B, T, H), LinearHead(W, chunk_size=chunk, fused_chain=True,
                                                                     grad_accumulation=grad_accumulation),
                                          labels).loss.backward()
        h.grad = W.grad = None
    if variant.startswith("chain_"):  # one chunk's chain: compiled (chain_fused) before the peak is reset
        from numlearn.losses.linear import _chain_inplace, _fused_chain

        z0 = torch.randn(min(chunk, B * T), V, generator=g).to(device) * 3
        tt, ww = labels.view(-1)[: z0.shape[0]], torch.ones(z0.shape[0], device=device)
        f = _fused_chain() if variant == "chain_fused" else _chain_inplace
        z = z0.clone()
        ww = ww if variant == "chain_fused" else None  # as _ce_pass calls each (no row weights)
        f(z, tt, ww, 1.0)  # compiled once before the clock
    if variant == "liger_flce":
        try:
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        except ImportError as e:
            raise SystemExit(f"liger-kernel is not installed ({e}): `make gpu-check-wheels` carries {LIGER_PIN}") from e
        if not cuda:
            raise SystemExit("liger-kernel's fused linear cross-entropy is a Triton kernel: --device cuda only")
        liger = LigerFusedLinearCrossEntropyLoss()  # mean CE over the targets, as hf_default
    if cuda:  # the device's allocator: peak allocated bytes since the inputs exist
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    else:
        reset_peak()
        base = rss_mb()
    # grad W and grad h, in the parameters' dtype: every variant ends holding them
    grad_mb = (W.numel() + h.numel()) * W.element_size() / 2**20
    fns = {"fused_logits": DELLoss(vocab, alpha=1.28), "linear_del": DELLoss(vocab, alpha=1.28),
           "linear_del_fused": DELLoss(vocab, alpha=1.28), "linear_ce": MLELoss(vocab)}
    times = []
    for _ in range(reps):
        h.grad = W.grad = None
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        loss = None
        if variant.startswith("chain_"):
            z.copy_(z0)
            t = time.perf_counter()
            f(z, tt, ww, 1.0)
        elif variant == "floor":
            with torch.no_grad():
                gh, gw = torch.zeros_like(h), torch.zeros_like(W)
                for s in range(0, B * T, chunk):
                    hc = h[s : s + chunk]
                    z = hc @ W.t()
                    gh[s : s + chunk] = z @ W
                    gw.addmm_(z.t(), hc)
                del z, gh, gw
        elif variant == "hf_default":
            logits = h @ W.t()
            loss = F.cross_entropy(logits.float()[:-1], labels.view(-1)[1:])
        elif variant == "liger_flce":
            loss = liger(W, h[:-1], labels.view(-1)[1:])
        elif variant == "fused_logits":
            loss = fns[variant]((h @ W.t()).view(B, T, V), labels).loss
        else:
            head = LinearHead(W, chunk_size=chunk, grad_accumulation=grad_accumulation,
                              fused_chain=variant.endswith("_fused"))
            loss = fns[variant].from_hidden(h.view(B, T, H), head, labels).loss
        if loss is not None:
            loss.backward()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        del loss
        logits = None  # noqa: F841
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_mb()
    return {"variant": variant, "device": torch.cuda.get_device_name() if cuda else "cpu",
            "grad_accumulation": grad_accumulation, "dtype": dtype, "seconds": min(times), "peak_extra_mb": peak - base - grad_mb,
            "chunk_block_mb": min(chunk, B * T) * V * 4 / 2**20}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4x1024,4x1500")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=V, help="smaller V / H for a quick check of the script only")
    ap.add_argument("--hidden", type=int, default=H)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="h and W (the head) in this dtype; the losses compute in fp32 either way")
    ap.add_argument("--grad-accumulation", choices=("float32", "weight"), default="float32",
                    help="from_hidden's grad W accumulator: fp32 (default) or the weight's dtype")
    ap.add_argument("--device", default="cpu", help="cpu (peak: process RSS) or cuda (peak: allocated bytes)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args(argv)
    if a.one:
        v, shape = a.one.split("@")
        B, T = (int(x) for x in shape.split("x"))
        print(json.dumps(one(v, B, T, a.reps, a.chunk, a.hidden, a.vocab, a.dtype, a.grad_accumulation, a.device)))
        return 0
    import torch

    out = {"H": a.hidden, "V": a.vocab, "device": a.device, "dtype": a.dtype, "grad_accumulation": a.grad_accumulation, "threads": torch.get_num_threads(), "chunk": a.chunk,
           "reps": a.reps, "shapes": {}}
    for shape in a.shapes.split(","):
        rows = {}
        for v in a.variants.split(","):
            r = subprocess.run([sys.executable, __file__, "--one", f"{v}@{shape}", "--reps", str(a.reps),
                                "--chunk", str(a.chunk), "--vocab", str(a.vocab), "--hidden", str(a.hidden),
                                "--dtype", a.dtype, "--grad-accumulation", a.grad_accumulation,
                                "--device", a.device],
                               cwd=REPO, capture_output=True, text=True)
            if r.returncode != 0:
                rows[v] = {"variant": v, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
            else:
                rows[v] = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"  {shape} {v}: {rows[v]}", file=sys.stderr, flush=True)
        out["shapes"][shape] = rows
        ref = rows.get("hf_default", {})
        print(f"\nB x T = {shape}, H = {a.hidden}, V = {a.vocab}, {a.dtype} head (grad W accumulated in {a.grad_accumulation}), {a.device}, CPU threads {out['threads']}, "
              f"chunk {a.chunk}, best of {a.reps}\n")
        print("| variant | fwd+bwd s | time / HF | peak extra MB | mem / HF | peak / one fp32 chunk block |")
        print("|---|---|---|---|---|---|")
        for v, r in rows.items():
            if "error" in r:
                print(f"| {v} | failed: {r['error']} | | | | |")
                continue
            rt = r["seconds"] / ref["seconds"] if "seconds" in ref else float("nan")
            rm = r["peak_extra_mb"] / ref["peak_extra_mb"] if "peak_extra_mb" in ref else float("nan")
            print(f"| {v} | {r['seconds']:.2f} | {rt:.2f} | {r['peak_extra_mb']:.0f} | {rm:.3f} | "
                  f"{r['peak_extra_mb'] / r['chunk_block_mb']:.2f} |")
        floor = rows.get("floor", {}).get("seconds")
        if floor:
            print("\ntime / the three head products alone (floor): " + ", ".join(
                f"{v} {r['seconds'] / floor:.2f}x" for v, r in rows.items()
                if "seconds" in r and v not in ("floor",) and not v.startswith("chain_")))
        if rows.get("chain_eager", {}).get("seconds") and rows.get("chain_fused", {}).get("seconds"):
            print(f"one chunk's chain: eager {1000 * rows['chain_eager']['seconds']:.1f} ms, fused "
                  f"{1000 * rows['chain_fused']['seconds']:.1f} ms "
                  f"({rows['chain_fused']['seconds'] / rows['chain_eager']['seconds']:.2f}x)")
        if "peak_extra_mb" in rows.get("linear_ce", {}) and "peak_extra_mb" in rows.get("linear_del", {}):
            d = rows["linear_del"]["peak_extra_mb"] / max(rows["linear_ce"]["peak_extra_mb"], 1e-9) - 1
            print(f"\nDEL over linear CE: peak memory {100 * d:+.1f} %, time "
                  f"{100 * (rows['linear_del']['seconds'] / rows['linear_ce']['seconds'] - 1):+.1f} %")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
