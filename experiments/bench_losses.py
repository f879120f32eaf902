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


def build_labels(tokenizer, B: int, T: int, n_solutions: int = 400):
    """``[B, T]`` token ids of GSM8K train solutions (the first ``n_solutions``, repeated to fill)."""
    import torch

    texts = []
    f = SHARED / "data" / "train" / "gsm8k" / "train.jsonl"
    if f.exists():
        for line in f.read_text().splitlines()[:n_solutions]:
            texts.append(json.loads(line)["answer"])
    else:  # no shared data: number-heavy generated text
        from numlearn.data.synthetic import generate

        texts = [p.cot for p in generate("train", 2000)]
    ids = tokenizer("\n".join(texts), add_special_tokens=False)["input_ids"]
    need = B * T
    ids = (ids * (need // len(ids) + 1))[:need]
    return torch.tensor(ids).view(B, T)


def del_term_loop(zd_all, targets, digit_ids, dot_id, alpha=0.01):
    """The DEL term with a Python loop over rows and spans, the way a first implementation (and
    the authors' script) does it. ``zd_all``: ``[B*T, 10]`` digit logits of every position."""
    import torch
    import torch.nn.functional as F

    B, T = targets.shape
    digit_of = {tid: k for k, tid in enumerate(digit_ids)}
    terms, n = [], 0
    for b in range(B):
        row = targets[b].tolist()
        i = 0
        while i < T:
            if row[i] in digit_of or row[i] == dot_id:
                s = i
                while i < T and (row[i] in digit_of or row[i] == dot_id):
                    i += 1
                toks = row[s:i]
                d = toks.index(dot_id) if dot_id in toks else -1
                pos, ws, ys = [], [], []
                for jj, tk in enumerate(toks):
                    if tk == dot_id:
                        continue
                    if d > 0:
                        ws.append(2.0 * (d - jj) if jj < d else 1.02 ** (-(jj - d + 1)))
                    else:
                        ws.append(2.0 * (len(toks) - jj))
                    pos.append(b * T + s + jj)
                    ys.append(digit_of[tk])
                z = zd_all[pos]
                p = torch.softmax(z, -1)
                y = F.one_hot(torch.tensor(ys), 10).float()
                bce = F.binary_cross_entropy_with_logits(z, y, reduction="none")
                terms.append((torch.tensor(ws) * (p * bce).sum(-1)).sum())
                n += len(pos)
            else:
                i += 1
    return alpha * torch.stack(terms).sum() / (10 * n) if terms else zd_all.sum() * 0


def del_term_vectorised(zd_all, targets, vocab, alpha=0.01):
    import torch.nn.functional as F

    from numlearn.losses import number_spans

    dt = number_spans(targets, vocab)
    z = zd_all[dt.rows]
    p = z.softmax(-1)
    bce = F.softplus(z) - F.one_hot(dt.values, 10).float() * z
    return alpha * (dt.del_weight * (p * bce).sum(-1)).sum() / (10 * max(dt.count, 1))


def del_loop(logits, labels, digit_ids, dot_id, alpha=0.01):
    """Full loss: torch CE + the per-span loop DEL term."""
    import torch.nn.functional as F

    V = logits.shape[-1]
    t = F.pad(labels[:, 1:], (0, 1), value=-100)
    ce = F.cross_entropy(logits.view(-1, V), t.reshape(-1), ignore_index=-100)
    zd_all = logits.view(-1, V)[:, list(digit_ids)]
    return ce + del_term_loop(zd_all, t, digit_ids, dot_id, alpha)


def numeric_part_only(B, T, reps):
    """The DEL term alone, from the [B*T, 10] digit logits: vectorised vs loop, forward+backward."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer

    from numlearn.losses import digit_token_ids

    tok = AutoTokenizer.from_pretrained(SHARED / "assets" / "tokenizers" / "qwen2.5")
    labels = build_labels(tok, B, T)
    vocab = digit_token_ids(tok)
    t = F.pad(labels[:, 1:], (0, 1), value=-100)
    zd = torch.randn(B * T, 10, requires_grad=True)
    out = {}
    for name, fn in (("vectorised", lambda: del_term_vectorised(zd, t, vocab)),
                     ("loop", lambda: del_term_loop(zd, t, vocab.digit_ids, vocab.dot_id))):
        best, val = 1e9, None
        for _ in range(reps):
            zd.grad = None
            t0 = time.perf_counter()
            val = fn()
            val.backward()
            best = min(best, time.perf_counter() - t0)
        out[name] = (best, float(val))
    return out


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
    part = numeric_part_only(B, T, max(a.reps, 5))
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
    print(f"\nwhole loss, DEL with per-span loop / DEL vectorised: {res['del_loop']['seconds'] / res['del']['seconds']:.2f}x")
    (tv, vv), (tl, vl) = part["vectorised"], part["loop"]
    print(f"numeric part alone (DEL term fwd+bwd from the [B*T, 10] digit logits): vectorised {1000 * tv:.2f} ms, "
          f"per-span loop {1000 * tl:.1f} ms -> {tl / tv:.0f}x faster (values {vv:.6f} vs {vl:.6f})")
    worst_t = max(res[v]["seconds"] / ce_f["seconds"] for v in ("ntl", "dist2", "del"))
    worst_m = max((res[v]["peak_mb"] - res[v]["base_mb"]) / (ce_f["peak_mb"] - ce_f["base_mb"]) for v in ("ntl", "dist2", "del"))
    print(f"numeric part overhead vs the same CE kernel: time +{100 * (worst_t - 1):.1f}% (worst loss), "
          f"peak memory +{100 * (worst_m - 1):.1f}%")
    if a.json:
        Path(a.json).write_text(json.dumps({"variants": res, "numeric_part_only": part}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
