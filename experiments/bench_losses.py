"""Cost of the numeric losses next to cross-entropy at Qwen2.5 scale (a benchmark, not a test).

    make bench-losses            # = python experiments/bench_losses.py [--reps 3] [--shape 4x1024]

Labels are real Qwen2.5 token ids of GSM8K train solutions (../shared, else generated text),
B x T = 4 x 1024 response tokens, V = 151,665, fp32 logits on CPU. Every variant runs in its own
subprocess so its peak memory (ru_maxrss high-water mark, minus the RSS after the logits exist)
is its own. Printed: forward+backward seconds (best of --reps) and peak extra memory, with ratios
measured in this one run:
  * each loss against CE alone, both as PyTorch's F.cross_entropy (what HF uses) and as
    numlearn's fused CE (loss=mle; the numeric losses share its kernel);
  * DEL against a straightforward per-span Python-loop implementation like the authors'.
Targets (issue): the numeric part adds <= 10% time and <= 10% peak memory to CE; >= 20x faster
than the loop version.
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
SHARED = Path(os.environ.get("NUMLEARN_SHARED_DIR", REPO.parent / "shared"))
VARIANTS = ["ce_torch", "mle", "ntl", "dist2", "del", "del_loop"]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_labels(tokenizer, B: int, T: int):
    import torch

    texts = []
    f = SHARED / "data" / "train" / "gsm8k" / "train.jsonl"
    if f.exists():
        for line in f.read_text().splitlines()[:400]:
            texts.append(json.loads(line)["answer"])
    else:  # no shared data: number-heavy generated text
        from numlearn.data.synthetic import generate

        texts = [p.cot for p in generate("train", 2000)]
    ids = tokenizer("\n".join(texts), add_special_tokens=False)["input_ids"]
    need = B * T
    ids = (ids * (need // len(ids) + 1))[:need]
    return torch.tensor(ids).view(B, T)


def del_loop(logits, labels, digit_ids, dot_id, alpha=0.01):
    """Per-span Python loop, the way a first implementation (and the authors' script) does it."""
    import torch
    import torch.nn.functional as F

    V = logits.shape[-1]
    t = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    ce = F.cross_entropy(logits.view(-1, V), t.reshape(-1), ignore_index=-100)
    digit_of = {tid: k for k, tid in enumerate(digit_ids)}
    terms, n = [], 0
    for b in range(t.shape[0]):
        row = t[b].tolist()
        i = 0
        while i < len(row):
            if row[i] in digit_of or row[i] == dot_id:
                s = i
                while i < len(row) and (row[i] in digit_of or row[i] == dot_id):
                    i += 1
                span = list(range(s, i))
                toks = [row[j] for j in span]
                d = toks.index(dot_id) if dot_id in toks else -1
                for jj, pos in enumerate(span):
                    if toks[jj] == dot_id:
                        continue
                    if d > 0:
                        w = 2.0 * (d - jj) if jj < d else 1.02 ** (-(jj - d + 1))
                    else:
                        w = 2.0 * (len(span) - jj)
                    z = logits[b, pos][list(digit_ids)]
                    p = torch.softmax(z, -1)
                    y = torch.zeros(10)
                    y[digit_of[toks[jj]]] = 1.0
                    bce = F.binary_cross_entropy_with_logits(z, y, reduction="none")
                    terms.append(w * (p * bce).sum())
                    n += 1
            else:
                i += 1
    aux = alpha * torch.stack(terms).sum() / (10 * n) if terms else logits.sum() * 0
    return ce + aux


def run_variant(name: str, B: int, T: int, reps: int) -> dict:
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer

    from numlearn.losses import build_loss, digit_token_ids

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(SHARED / "assets" / "tokenizers" / "qwen2.5")
    V = len(tok)
    labels = build_labels(tok, B, T)
    vocab = digit_token_ids(tok)
    digit_frac = float(torch.isin(labels, torch.tensor(vocab.digit_ids)).float().mean())
    logits = torch.randn(B, T, V, requires_grad=True)
    if name == "ce_torch":
        def step():
            t = F.pad(labels[:, 1:], (0, 1), value=-100)
            return F.cross_entropy(logits.view(-1, V), t.reshape(-1), ignore_index=-100)
    elif name == "del_loop":
        def step():
            return del_loop(logits, labels, vocab.digit_ids, vocab.dot_id)
    else:
        kw = {"mle": {}, "ntl": {"alpha": 0.1}, "dist2": {"alpha": 0.1}, "del": {"alpha": 0.01}}[name]
        fn = build_loss(name, tok, **kw)

        def step():
            return fn(logits, labels).loss
    base = rss_mb()
    base_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for _ in range(reps if name != "del_loop" else 1):
        logits.grad = None
        t0 = time.perf_counter()
        loss = step()
        loss.backward()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": name, "seconds": min(times),
            "peak_mb": peak, "base_mb": base, "loss": float(loss), "V": V, "B": B, "T": T, "digit_fraction": digit_frac,
            "threads": torch.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4x1024")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="also write the measurements to this file")
    a = ap.parse_args(argv)
    B, T = map(int, a.shape.split("x"))
    if a.variant:
        print(json.dumps(run_variant(a.variant, B, T, a.reps)))
        return 0
    if not (SHARED / "assets" / "tokenizers" / "qwen2.5").exists():
        print(f"needs the Qwen2.5 tokenizer at {SHARED}/assets/tokenizers/qwen2.5", file=sys.stderr)
        return 2
    res = {}
    for v in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--variant", v, "--shape", a.shape, "--reps", str(a.reps)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        res[v] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  measured {v}: {res[v]['seconds']:.3f}s", file=sys.stderr, flush=True)
    r0 = res["ce_torch"]
    print(f"\nB x T = {B} x {T}, V = {r0['V']}, digit targets {100 * r0['digit_fraction']:.1f}% of tokens, "
          f"fp32, CPU threads {r0['threads']}, best of {a.reps}\n")
    print("| variant | fwd+bwd s | time / CE(torch) | time / CE(fused) | peak extra MB | mem / CE(torch) | mem / CE(fused) |")
    print("|---|---|---|---|---|---|---|")
    ce_t, ce_f = res["ce_torch"], res["mle"]
    for v in VARIANTS:
        r = res[v]
        print(f"| {v} | {r['seconds']:.3f} | {r['seconds'] / ce_t['seconds']:.3f} | {r['seconds'] / ce_f['seconds']:.3f} "
              f"| {r['peak_mb'] - r['base_mb']:.0f} | {(r['peak_mb'] - r['base_mb']) / (ce_t['peak_mb'] - ce_t['base_mb']):.3f} "
              f"| {(r['peak_mb'] - r['base_mb']) / (ce_f['peak_mb'] - ce_f['base_mb']):.3f} |")
    print(f"\nDEL loop / DEL vectorised: {res['del_loop']['seconds'] / res['del']['seconds']:.1f}x slower")
    worst_t = max(res[v]["seconds"] / ce_f["seconds"] for v in ("ntl", "dist2", "del"))
    worst_m = max((res[v]["peak_mb"] - res[v]["base_mb"]) / (ce_f["peak_mb"] - ce_f["base_mb"]) for v in ("ntl", "dist2", "del"))
    print(f"numeric part overhead vs the same CE kernel: time +{100 * (worst_t - 1):.1f}% (worst loss), "
          f"peak memory +{100 * (worst_m - 1):.1f}%")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
