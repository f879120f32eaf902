"""Cost of the number-token losses at Llama-3 scale (a benchmark, not a test; issue 28).

    make bench-losses      # runs this after bench_losses.py / bench_linear_loss.py
    python experiments/bench_number_tokens.py [--reps 3] [--shape 4x1024] [--hidden 256] [--out results/bench_number_tokens.md]

Labels: Llama-3 token ids (assets/tokenizers/llama3, `make assets`) of GSM8K train solutions, B x T =
4 x 1024, V = 128,256, 1,110 number tokens of 1-3 digits; fp32 on CPU. Every variant runs in its own
subprocess, so its peak memory (ru_maxrss high-water mark, minus the RSS once its inputs exist) is its
own. Measured side by side in one run:

* logits path: numlearn's CE kernel alone (the fused CE of every loss, no numeric term) against DEL
  (code and paper form), NTL (digit level and whole-number), DIST2 on number tokens: forward+backward
  time, each loss alternating with the kernel in its own process (so a load that drifts meets both),
  and peak extra memory against the kernel's own process;
* the numeric part alone: from the ``[P, 1,110]`` number columns of the P number-token positions to the
  DEL term, forward+backward, as a share of the CE kernel's time;
* hidden-state path (``from_hidden``, hidden size --hidden): the chunked linear CE alone against DEL's
  ``from_hidden``, which gathers ``h @ W[number ids].T`` and never the full logits.

Targets (issue 28): the numeric term costs <= 5 % of the CE kernel's time and no extra
full-vocabulary buffer (a [B*T, V] fp32 buffer here is 2,101 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NUMLEARN_SHARED_DIR", REPO.parent / "shared"))
TOKENIZER = Path(os.environ.get("NUMLEARN_ASSETS_DIR", REPO / "assets")) / "tokenizers" / "llama3"
LOGIT_VARIANTS = ["ce_kernel", "del", "del_paper", "ntl", "ntl_number", "dist2"]
HIDDEN_VARIANTS = ["linear_ce", "del_linear"]
OPTS = {"del": ("del", {"alpha": 1.28}), "del_paper": ("del", {"alpha": 1.28, "form": "paper"}),
        "ntl": ("ntl", {"alpha": 12.8}), "ntl_number": ("ntl", {"alpha": 0.01, "level": "number"}),
        "dist2": ("dist2", {"alpha": 128.0})}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_labels(tokenizer, B: int, T: int):
    """GSM8K train solutions in the tokenizer's ids, as ``bench_losses`` builds them (600 solutions)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_losses import build_labels as labels_of

    return labels_of(tokenizer, B, T, n_solutions=600)


def _timed(step, reps, zero) -> tuple[float, float]:
    times, val = [], None
    for _ in range(reps):
        zero()
        t0 = time.perf_counter()
        val = step()
        val.backward()
        times.append(time.perf_counter() - t0)
    return min(times), float(val.detach())


def _timed_pair(base, step, reps, zero) -> tuple[float, float, float]:
    """``base`` and ``step`` alternately, ``reps`` times each (a load that drifts meets both alike):
    the best time of each and the loss value."""
    tb, ts, val = [], [], None
    for _ in range(reps):
        for fn, out in ((base, tb), (step, ts)):
            zero()
            t0 = time.perf_counter()
            val = fn()
            val.backward()
            out.append(time.perf_counter() - t0)
    return min(tb), min(ts), float(val.detach())


def run_variant(name: str, B: int, T: int, H: int, reps: int) -> dict:
    import torch
    from transformers import AutoTokenizer

    from numlearn.losses import build_loss, number_token_vocab, shift_targets
    from numlearn.losses.base import _CrossEntropyWithDigitLogits
    from numlearn.losses.linear import LinearHead, LinearOptions, linear_ce_and_digit_logits
    from numlearn.losses.numbers import number_targets

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    V = len(tok)
    labels = build_labels(tok, B, T)
    nv = number_token_vocab(tok)
    t = shift_targets(labels)
    nt = number_targets(t, nv, V)
    info = {"V": V, "B": B, "T": T, "n_number_tokens": len(nv.ids), "n_digit_targets": nt.count,
            "n_number_positions": int(torch.unique(nt.digits.rows).numel()), "threads": torch.get_num_threads()}
    empty = torch.zeros(0, dtype=torch.long)
    if name in LOGIT_VARIANTS:
        logits = torch.randn(B, T, V, requires_grad=True)
        flat_t = t.reshape(-1)

        def base():  # numlearn's CE kernel alone (what every loss's CE is), no numeric term
            ce_sum, _ = _CrossEntropyWithDigitLogits.apply(logits.reshape(-1, V), flat_t, empty,
                                                           nv.ids_tensor("cpu"), None)
            return ce_sum / float((flat_t != -100).sum())

        if name == "ce_kernel":
            step = base
        else:
            loss_name, kw = OPTS[name]
            fn = build_loss(loss_name, tok, **kw)

            def step():
                return fn(logits, labels).loss

        def zero():
            logits.grad = None
    else:
        h = torch.randn(B, T, H, requires_grad=True)
        W = (torch.randn(V, H) * H ** -0.5).requires_grad_(True)
        flat_t = t.reshape(-1)
        idx = torch.nonzero(flat_t != -100).squeeze(1)

        def base():  # the chunked linear CE alone
            ce_sum, _ = linear_ce_and_digit_logits(h.reshape(-1, H), W, None, idx, flat_t[idx],
                                                   options=LinearOptions(1024))
            return ce_sum / float(idx.numel())

        if name == "linear_ce":
            step = base
        else:
            fn = build_loss("del", tok, alpha=1.28)

            def step():
                return fn.from_hidden(h, LinearHead(W, chunk_size=1024), labels).loss

        def zero():
            h.grad = None
            W.grad = None
    rss0 = rss_mb()
    if name in ("ce_kernel", "linear_ce"):
        seconds, value = _timed(step, reps, zero)
        base_seconds = seconds
    else:  # this loss and the CE it adds to, alternately in this one process
        base_seconds, seconds, value = _timed_pair(base, step, reps, zero)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": name, "seconds": seconds, "base_seconds": base_seconds, "peak_mb": peak, "base_mb": rss0,
            "loss": value, **info}


def numeric_part_only(B: int, T: int, reps: int) -> dict:
    """The DEL term alone from the number columns: ``[P, 1,110]`` -> digit marginals -> term, fwd+bwd."""
    import torch
    from transformers import AutoTokenizer

    from numlearn.losses import build_loss, number_token_vocab, shift_targets
    from numlearn.losses.numbers import number_digit_logits, number_targets

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    nv = number_token_vocab(tok)
    t = shift_targets(build_labels(tok, B, T))
    nt = number_targets(t, nv, len(tok))
    pos, inv = torch.unique_consecutive(nt.digits.rows, return_inverse=True)
    zn = torch.randn(pos.numel(), len(nv.ids), requires_grad=True)
    fn = build_loss("del", tok, alpha=1.28)

    def step():
        zd = number_digit_logits(zn, nt, nv, row_index=inv)
        return fn.alpha * fn.digit_term(zd, nt.digits).sum() / nt.count

    def zero():
        zn.grad = None

    seconds, value = _timed(step, max(reps, 5), zero)
    return {"seconds": seconds, "value": value, "positions": int(pos.numel())}


def _table(res: dict, extra: dict, variants: list[str], base: str) -> list[str]:
    """Markdown rows of ``variants`` (the first is ``base`` alone): time against the base timed in the
    same process, peak memory against the base's own process."""
    out = [f"| variant | fwd+bwd s | {base} s, same process | time / {base} | peak extra MB | "
           f"extra MB over the {base}'s |", "|---|---|---|---|---|---|"]
    for v in variants:
        r = res[v]
        out.append(f"| {v} | {r['seconds']:.3f} | {r['base_seconds']:.3f} | {r['seconds'] / r['base_seconds']:.3f} | "
                   f"{extra[v]:.0f} | {extra[v] - extra[variants[0]]:+.0f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4x1024")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="write the Markdown report here too")
    a = ap.parse_args(argv)
    B, T = map(int, a.shape.split("x"))
    if a.variant:
        print(json.dumps(run_variant(a.variant, B, T, a.hidden, a.reps)))
        return 0
    if not (TOKENIZER / "tokenizer.json").exists():
        print(f"needs the Llama-3 tokenizer at {TOKENIZER}: make assets (python -m numlearn.assets llama3-tokenizer "
              "--out assets/tokenizers/llama3)", file=sys.stderr)
        return 2
    t_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res = {}
    for v in LOGIT_VARIANTS + HIDDEN_VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--variant", v, "--shape", a.shape, "--reps", str(a.reps),
                              "--hidden", str(a.hidden)], capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        res[v] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  measured {v}: {res[v]['seconds']:.3f}s", file=sys.stderr, flush=True)
    part = numeric_part_only(B, T, a.reps)
    k = res["ce_kernel"]
    extra = {v: r["peak_mb"] - r["base_mb"] for v, r in res.items()}
    full_mb = B * T * k["V"] * 4 / 2**20
    lines = [f"B x T = {B} x {T}, V = {k['V']}, {k['n_number_tokens']} number tokens, {k['n_digit_targets']} digit "
             f"targets in {k['n_number_positions']} number-token positions ({100 * k['n_number_positions'] / (B * T):.1f}% "
             f"of tokens), fp32, CPU threads {k['threads']}, best of {a.reps}; a [B*T, V] fp32 buffer is "
             f"{full_mb:.0f} MB", "",
             *_table(res, extra, LOGIT_VARIANTS, "CE kernel"),
             "", f"hidden-state path (from_hidden, H = {a.hidden}, chunks of 1,024 positions):", "",
             *_table(res, extra, HIDDEN_VARIANTS, "linear CE")]
    worst = max(res[v]["seconds"] / res[v]["base_seconds"] for v in LOGIT_VARIANTS[1:])
    worst_mem = max(extra[v] - extra["ce_kernel"] for v in LOGIT_VARIANTS[1:])
    lines += ["",
              f"numeric part alone (DEL term fwd+bwd from the [{part['positions']}, {k['n_number_tokens']}] number "
              f"columns): {1000 * part['seconds']:.1f} ms = {100 * part['seconds'] / k['seconds']:.2f}% of the CE "
              f"kernel's {k['seconds']:.3f} s (target <= 5%)",
              f"whole loss over the CE kernel, worst loss: time {100 * (worst - 1):+.1f}%, peak memory "
              f"{worst_mem:+.0f} MB (a full-vocabulary buffer would be +{full_mb:.0f} MB)",
              f"from_hidden: DEL over the linear CE: time "
              f"{100 * (res['del_linear']['seconds'] / res['del_linear']['base_seconds'] - 1):+.1f}%,"
              f" peak memory {extra['del_linear'] - extra['linear_ce']:+.0f} MB"]
    text = "\n".join(lines)
    print("\n" + text)
    if a.out:
        import torch

        from numlearn.provenance import git_info

        g = git_info()
        head = ["<!-- output of a real run; see header -->",
                f"- command: `python experiments/bench_number_tokens.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
                " (make bench-losses)",
                f"- date: {t_start}; git: {g['commit']}{' (dirty)' if g['dirty'] else ''}",
                f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__}", ""]
        Path(a.out).write_text("\n".join(head) + "\n```\n" + text + "\n```\n")
        Path(a.out).with_suffix(".json").write_text(json.dumps({"variants": res, "numeric_part_only": part}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
