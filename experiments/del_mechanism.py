"""What the DEL term does on trained models and on the data (issue 27 §1; docs/what_del_does.md).

    python experiments/del_mechanism.py --run mle=outputs/table1_tiny/tiny/mle/alpha=0.0/seed=0 \
        --run del=outputs/table1_tiny/tiny/del/alpha=1.28/seed=0 ... --out results/del_mechanism

For each run's final model, teacher forced on the held-out test solutions (the synthetic test split
the run's held-out metrics use): at every digit target, whether one gradient step of each DEL form's
term (code, paper; numlearn.losses.mechanism) would lower the target token's full-vocabulary
probability -- the share of positions and the share of place weight where it would -- with the raw
digit logits' mean, the digits' share of the softmax and the digit entropy. From each run's
``metrics.jsonl``: the aux/CE ratio and (where logged) the mean digit logit over training. From the
data: the mean DEL place weight per digit on the synthetic training set, GSM8K-train and MATH-train.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def heldout_records(experiment: str = "table1_tiny", n: int | None = None, cache: Path = REPO / "data_cache"):
    """The held-out solutions a preset's result files are measured on (its ``eval.teacher_forced``:
    the synthetic test split of its ``data.difficulty``, e.g. ``long3`` for ``pretrained_tiny``; the
    first ``n`` of them, default the preset's own ``n``) and the preset's composed config."""
    from numlearn.cli import preset_config
    from numlearn.evaluation.teacher_forced import preset_records

    cfg = preset_config(experiment, [*([f"eval.teacher_forced.n={n}"] if n else []), f"paths.cache_dir={cache}"])
    return preset_records(cfg), cfg


def measure_model(run_dir: Path, records: list[dict], max_length: int = 512, batch_size: int = 32) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from numlearn.data.collate import PadCollator, tokenize_records
    from numlearn.evaluation.probe import position_stats
    from numlearn.losses import digit_token_ids, digit_view

    final = run_dir / "final"
    tok = AutoTokenizer.from_pretrained(final)
    model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32).eval()
    vocab = digit_token_ids(tok)
    feats, _ = tokenize_records(records, tok, max_length)
    coll = PadCollator(tok.pad_token_id)
    acc: dict[str, list[torch.Tensor]] = {k: [] for k in ("w", "zmean", "q", "ent", "low_code", "low_paper", "py")}
    by_dist = torch.zeros(10)
    with torch.no_grad():
        for i in range(0, len(feats), batch_size):
            b = coll(feats[i : i + batch_size])
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.float()
            # the per-position quantities: numlearn.probe's definitions (one implementation)
            st = position_stats(logits, b["labels"], vocab)
            zd, dt = digit_view(logits, b["labels"], vocab)
            p = torch.softmax(zd, -1)
            dist = (torch.arange(10) - dt.values.unsqueeze(1)).abs()
            by_dist.index_add_(0, dist.reshape(-1), p.reshape(-1))
            acc["w"].append(st["weight"])
            acc["zmean"].append(st["digit_logit"])
            acc["q"].append(st["digit_mass"])
            acc["ent"].append(st["entropy"])
            acc["py"].append((-st["nll"]).exp())
            for form in ("code", "paper"):
                acc[f"low_{form}"].append(st[f"lowers_{form}"])
    t = {k: torch.cat(v) for k, v in acc.items()}
    w = t["w"]
    out = {"n_digits": int(w.numel()), "n_examples": len(feats), "mean_digit_logit": float(t["zmean"].mean()),
           "mean_digit_mass": float(t["q"].mean()), "mean_digit_entropy": float(t["ent"].mean()),
           "mean_target_prob": float(t["py"].mean()),
           "mass_by_distance": (by_dist / max(w.numel(), 1)).tolist()}
    for form in ("code", "paper"):
        low = t[f"low_{form}"] > 0
        out[f"{form}_lowers_share"] = float(low.float().mean())
        out[f"{form}_lowers_weight_share"] = float((w * low).sum() / w.sum())
    return out


def training_history(run_dir: Path) -> dict:
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    rows = [r for r in rows if "loss/ce" in r and r.get("step") is not None]
    ratio = [(r["step"], r["loss/aux"] / r["loss/ce"]) for r in rows if r.get("loss/ce")]
    logit = [(r["step"], r["train/digit_logit"]) for r in rows if "train/digit_logit" in r]

    def at(series, frac):
        if not series:
            return None
        return series[min(len(series) - 1, int(frac * (len(series) - 1)))][1]
    return {"steps": rows[-1]["step"] if rows else None,
            "aux_over_ce": {f"{int(f * 100)}%": at(ratio, f) for f in (0.0, 0.1, 0.5, 1.0)},
            "digit_logit": {f"{int(f * 100)}%": at(logit, f) for f in (0.0, 0.1, 0.5, 1.0)} if logit else None}


def data_place_weights(data_dir: Path, n_synthetic: int, difficulty: str | None = None,
                       n_variant: int | None = None, cache: Path = REPO / "data_cache") -> dict:
    """Mean DEL place weight per digit of each training set's responses, from the text (one token
    per character: the spans and weights are those of any tokenizer with single-digit tokens); with
    ``difficulty``, that variant's training split too. ``n_synthetic`` and ``n_variant``: the training
    sets' sizes (the presets' ``data.n_train``; ``main`` reads them from the composed configs)."""
    from numlearn.data.sources import convert_record, read_records
    from numlearn.losses import DigitVocab, number_spans

    vocab = DigitVocab(digit_ids=tuple(range(ord("0"), ord("9") + 1)), dot_id=ord("."))

    def stats(texts: list[str]) -> dict:
        ws, lens = [], []
        for text in texts:
            t = torch.tensor([[min(ord(c), 0x10FFFF) for c in text]])
            dt = number_spans(t, vocab, float_spans=True)
            ws.append(dt.del_weight)
            lens.append(len(text))
        w = torch.cat(ws)
        return {"responses": len(texts), "digits": int(w.numel()), "mean_place_weight": float(w.mean()),
                "digits_per_1000_chars": 1000.0 * w.numel() / max(sum(lens), 1),
                "share_weight_ge_6": float((w >= 6).float().mean())}

    from numlearn.data.synthetic import ensure_synthetic

    out = {}
    path = ensure_synthetic(cache, n_synthetic, 0, 0, 0)["train"]
    out["synthetic (train, CoT)"] = stats([r["cot"] for r in read_records(path)])
    if difficulty:
        path = ensure_synthetic(cache, n_variant, 0, 0, 0, difficulty=difficulty)["train"]
        out[f"synthetic {difficulty} (train, CoT)"] = stats([r["cot"] for r in read_records(path)])
    for name, rel in (("GSM8K-train", "train/gsm8k/train.jsonl"), ("MATH-train", "train/math/orgn-MATH-train.jsonl")):
        f = data_dir / rel
        if f.is_file():
            out[name] = stats([convert_record(r, str(f))["output"] for r in read_records(f)])
    return out


def _fmt(x, nd=3):
    return "" if x is None else f"{x:.{nd}f}"


KEYS = ("mean_target_prob", "mean_digit_entropy", "mean_digit_logit", "mean_digit_mass", "code_lowers_share",
        "code_lowers_weight_share", "paper_lowers_share", "paper_lowers_weight_share")


def _summarise(rs: list[dict]) -> dict:
    """Per-row mean over seeds and the seed-bootstrap interval of each measurement."""
    from numlearn.reporting.stats import seed_mean_ci

    out = {"seeds": len(rs)}
    for k in KEYS:
        vals = [r[k] for r in rs]
        lo, hi = seed_mean_ci(vals)
        out[k] = {"mean": sum(vals) / len(vals), "ci": [lo, hi], "values": vals}
    out["mass_by_distance"] = [sum(r["mass_by_distance"][d] for r in rs) / len(rs) for d in range(10)]
    for k in ("aux_over_ce", "digit_logit"):
        hs = [list(r["history"][k].values()) for r in rs if r["history"].get(k)]
        out[k] = [sum(v[i] for v in hs) / len(hs) for i in range(len(hs[0]))] if hs and len(hs) == len(rs) else None
    return out


def _cell(m: dict, nd: int = 3, scale: float = 1.0) -> str:
    mean, (lo, hi) = m["mean"] * scale, m["ci"]
    if lo != lo:  # NaN: one seed
        return f"{mean:.{nd}f}"
    return f"{mean:.{nd}f} [{lo * scale:.{nd}f}, {hi * scale:.{nd}f}]"


def _plot_distance(summary: dict, path: Path) -> None:
    """The paper's Figure 1 question: how much of the digit distribution sits at |k - y| = 0, 1, ...
    (over-sharpened vs over-flattened), one line per model, mean over its seeds."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 3.4))
    ax = fig.subplots()
    for name, m in summary.items():
        ax.semilogy(range(10), [max(v, 1e-6) for v in m["mass_by_distance"]], marker="o", label=f"{name} ({m['seeds']})")
    ax.set_xlabel("|k - y| (distance of the digit class from the target)")
    ax.set_ylabel("mean probability mass")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=REPO / "data")
    ap.add_argument("--n", type=int, default=None, help="held-out test solutions (default: the preset's eval.teacher_forced.n)")
    ap.add_argument("--cache", type=Path, default=REPO / "data_cache", help="where the synthetic splits are generated")
    ap.add_argument("--experiment", default=None,
                    help="the preset whose held-out solutions (eval.teacher_forced) and training data are measured "
                         "(default: table1_tiny; pretrained_tiny with --difficulty)")
    ap.add_argument("--difficulty", default=None,
                    help="the synthetic variant the runs fine-tuned on (long3: the pretrained start's task); checked "
                         "against the experiment's data.difficulty")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from numlearn.provenance import provenance
    from numlearn.records import RunRecord

    experiment = a.experiment or ("pretrained_tiny" if a.difficulty else "table1_tiny")
    records, cfg = heldout_records(experiment, a.n, a.cache)
    difficulty = cfg.data.get("difficulty")
    if a.difficulty and a.difficulty != difficulty:
        print(f"del_mechanism: error: --difficulty {a.difficulty}, but experiment={experiment} trains on "
              f"data.difficulty={difficulty}: pass the --experiment whose task it is", file=sys.stderr)
        return 2
    max_length, n = int(cfg.eval.teacher_forced.max_length), len(records)
    runs: dict[str, list[dict]] = {}
    for spec in a.run:  # NAME=DIR[,DIR...]; a name given several run dirs (seeds) is averaged over them
        name, _, paths = spec.partition("=")
        for path in filter(None, paths.split(",")):
            d = Path(path)
            if not (d / "final").is_dir():
                print(f"del_mechanism: error: {d}/final does not exist: train the run first", file=sys.stderr)
                return 2
            runs.setdefault(name, []).append(
                {"run_dir": str(d), **measure_model(d, records, max_length), "history": training_history(d),
                 "run_json": {k: RunRecord.of_run_dir(d).to_dict().get(k)
                              for k in ("loss", "loss_tag", "alpha", "seed", "recipe_sha")}})
            print(f"[del_mechanism] {name} {d.name}: done", file=sys.stderr, flush=True)
    summary = {name: _summarise(rs) for name, rs in runs.items()}
    # the training sets' sizes as the presets read them: Table 1's (the base task) and, for a variant, this preset's
    from numlearn.cli import preset_config

    t1 = preset_config("table1_tiny", [f"paths.cache_dir={a.cache}"])
    data = data_place_weights(a.data_dir, n_synthetic=int(t1.data.n_train), difficulty=difficulty,
                              n_variant=int(cfg.data.n_train), cache=a.cache)
    prov = provenance()
    res = {"command": "python experiments/del_mechanism.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "provenance": prov,
           "machine": f"{platform.platform()}, {torch.get_num_threads()} thread(s)",
           "heldout": {"experiment": experiment, "split": "test", "difficulty": difficulty, "n": n}, "runs": runs,
           "summary": summary, "data": data}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "mechanism.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    git = (prov.get("git") or {}).get("commit", "?")
    lines = ["<!-- generated by experiments/del_mechanism.py; do not edit by hand -->",
             f"- command: `{res['command']}`", f"- date: {res['date']}", f"- git: {git}",
             f"- machine: {res['machine']}",
             f"- held-out solutions: synthetic test split{', ' + difficulty if difficulty else ''}, first {n}", "",
             "## Where one step of the DEL term lowers the target's probability (teacher forced, held-out)", "",
             "Mean over the seeds given [95 % seed-bootstrap interval, with 2+ seeds]; one trained model per seed.", "",
             "| model | seeds | target prob | digit entropy | mean digit logit | digit share of softmax "
             "| code form lowers: positions (%) | code: place weight (%) | paper form lowers: positions (%) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, m in summary.items():
        lines.append(f"| {name} | {m['seeds']} | {_cell(m['mean_target_prob'])} | {_cell(m['mean_digit_entropy'])} "
                     f"| {_cell(m['mean_digit_logit'], 2)} | {_cell(m['mean_digit_mass'])} "
                     f"| {_cell(m['code_lowers_share'], 1, 100)} | {_cell(m['code_lowers_weight_share'], 1, 100)} "
                     f"| {_cell(m['paper_lowers_share'], 1, 100)} |")
    lines += ["", "## Over training (metrics.jsonl, mean over seeds: at 0 %, 10 %, 50 % and 100 % of the logged steps)",
              "", "| model | aux / CE | mean digit logit |", "|---|---|---|"]
    for name, m in summary.items():
        ratio = " / ".join(_fmt(v) for v in m["aux_over_ce"])
        logit = " / ".join(_fmt(v, 2) for v in m["digit_logit"]) if m["digit_logit"] else "not logged"
        lines.append(f"| {name} | {ratio} | {logit} |")
    lines += ["", "## DEL's place weight per digit in the training data (from the text)", "",
              "| data | responses | digits | digits per 1,000 characters | mean place weight | share with weight >= 6 |",
              "|---|---|---|---|---|---|"]
    for name, d in data.items():
        lines.append(f"| {name} | {d['responses']} | {d['digits']} | {d['digits_per_1000_chars']:.1f} "
                     f"| {d['mean_place_weight']:.3f} | {100 * d['share_weight_ge_6']:.1f} % |")
    lines += ["", "## Digit probability mass by distance from the target (teacher forced, held-out)", "",
              "![mass at |k - y| per model, log scale](digit_distance.png)", ""]
    _plot_distance(summary, a.out / "digit_distance.png")
    (a.out / "mechanism.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
