"""Teacher-forced digit metrics: how a model scores the digits of reference solutions it is fed.

Generation says whether the answer came out right; this says how sure the model is of each digit
when the reference so far is given (what DEL acts on): held-out CE, digit accuracy, digit NLL and
digit entropy over every digit of the responses. Any model with digits in its vocabulary (single-
digit tokens, or number tokens of 1..K digits through their digit marginals) and any data with
numbers in their solutions: the synthetic task's test split, GSM8K's solutions, a JSONL file.

``eval.teacher_forced`` chooses the data (null: not computed):

    teacher_forced: {source: synthetic, n: 200}                      # the synthetic test split (data.seed, data.difficulty)
    teacher_forced: {source: file, file: <path>, n: 200}             # instruction/output, GSM8K or MATH records
    teacher_forced: {..., dtype: bfloat16}                           # matmuls under bf16 autocast (CPU with AMX: 2x)
    teacher_forced: {..., prefix_cache: {dir: D, frozen_layers: 20}}  # a top-layer fine-tune: frozen layers cached

The evaluator computes it once per model and writes it into every result file of that evaluation
(``teacher_forced``); training records training only.
"""

from __future__ import annotations

from pathlib import Path

import torch

SCALARS = ("ce", "digit_acc", "digit_nll", "digit_entropy", "n_digits", "n_examples")
SOURCES = ("synthetic", "file")


def teacher_forced_digits(model, tokenizer, records, vocab, max_length: int, batch_size: int = 32,
                          logits_fn=None) -> dict:
    """Teacher-forced CE and digit statistics of ``model`` on ``{"instruction", "output"}`` records
    (alpaca prompt, loss positions = response + EOS): ``ce``, ``digit_acc``, ``digit_entropy``,
    ``digit_nll``, ``n_digits``, ``n_examples``, plus ``mass_by_distance`` (mean p[k] by |k - target|),
    ``entropies`` (one per digit position) and ``by_example`` (per record, in order: ``n_digits``, ``correct``,
    ``nll``; what a bootstrap over problems resamples) for analysis. ``vocab``: a ``DigitVocab`` or
    ``NumberVocab`` (``numlearn.losses.resolve_vocab``). ``logits_fn(model, batch)``: how a batch's logits are
    computed (default: the full forward; ``prefix_cache.PrefixLogits``: from the frozen layers' cached states)."""
    from numlearn.data.collate import PadCollator, tokenize_records
    from numlearn.losses import IGNORE_INDEX, digit_summary, digit_view, shift_targets

    feats, _ = tokenize_records(records, tokenizer, max_length)
    coll = PadCollator(tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    ce_sum = n_tok = 0.0
    tot: dict = {}
    ents = []
    per = {"n_digits": [], "correct": [], "nll": []}
    dev = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(feats), batch_size):
            b = {k: v.to(dev) for k, v in coll(feats[i : i + batch_size]).items()}
            logits = (logits_fn(model, b) if logits_fn is not None
                      else model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits)
            t = shift_targets(b["labels"])
            ce_sum += float(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), t.flatten(), reduction="sum"))
            n_tok += float((t != IGNORE_INDEX).sum())
            s = digit_summary(*digit_view(logits, b["labels"], vocab))
            ents.append(s.pop("entropies").cpu())
            for k, v in s.items():
                tot[k] = tot[k] + v if k in tot else v
            for j in range(logits.shape[0]):  # each record's own sums (by_example); the totals stay the batch's
                r = digit_summary(*digit_view(logits[j : j + 1], b["labels"][j : j + 1], vocab))
                per["n_digits"].append(int(r["n"]))
                per["correct"].append(int(r["correct"]))
                per["nll"].append(round(float(r["nll"]), 6))
    model.train(was_training)
    n = float(tot.get("n", 0.0))
    nd = max(n, 1.0)
    return {"ce": ce_sum / max(n_tok, 1), "digit_acc": float(tot.get("correct", 0.0)) / nd,
            "digit_entropy": float(tot.get("entropy", 0.0)) / nd, "digit_nll": float(tot.get("nll", 0.0)) / nd,
            "n_digits": int(n), "n_examples": len(feats),
            "mass_by_distance": (tot["mass_by_distance"] / nd).tolist() if n else [0.0] * 10,
            "entropies": torch.cat(ents).tolist() if ents else [], "by_example": per}


def heldout_metrics(model, tokenizer, records, max_length: int, batch_size: int = 32, dtype: str = "float32",
                    logits_fn=None) -> dict:
    """The scalar teacher-forced metrics (``SCALARS``) a result file records and their ``by_example`` sums;
    ``{}`` for a tokenizer without digit tokens (nothing to measure). ``dtype="bfloat16"``: the forward under
    bf16 autocast (the weights stay as they are; digit statistics are computed in fp32)."""
    from numlearn.losses import TokenizerDigitError, resolve_vocab

    try:
        vocab = resolve_vocab(tokenizer)
    except TokenizerDigitError:
        return {}
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"eval.teacher_forced.dtype={dtype!r}: float32 or bfloat16")
    dev = next(model.parameters()).device.type
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        m = teacher_forced_digits(model, tokenizer, records, vocab, max_length, batch_size, logits_fn)
    return {**{k: m[k] for k in SCALARS}, "by_example": m["by_example"]}


def teacher_forced_records(tcfg, data_cfg, data_root: str | Path, cache_dir: str | Path) -> list[dict]:
    """The ``{"instruction", "output"}`` records ``eval.teacher_forced`` names (``tcfg``), the first
    ``n`` of them."""
    from numlearn.data.sources import convert_record, read_records

    source, n = str(tcfg.get("source") or ""), int(tcfg.get("n") or 0)
    if source not in SOURCES:
        raise ValueError(f"eval.teacher_forced.source={source!r}: choose one of {SOURCES} (or set "
                         "eval.teacher_forced=null to skip the teacher-forced metrics)")
    if n <= 0:
        raise ValueError(f"eval.teacher_forced.n={n}: the number of solutions to score, >= 1")
    if source == "synthetic":
        from numlearn.data.synthetic import ensure_synthetic

        # the test split of the task the run trained on: the base task, or its data.difficulty variant
        path = ensure_synthetic(Path(cache_dir), 0, n, 0, int(data_cfg.get("seed") or 0),
                                difficulty=data_cfg.get("difficulty"))["test"]
        return [{"instruction": r["question"], "output": r["cot"]} for r in read_records(path)][:n]
    if not tcfg.get("file"):
        raise ValueError("eval.teacher_forced.source=file needs eval.teacher_forced.file: a JSONL or JSON file of "
                         "instruction/output, GSM8K (question/answer with ####) or MATH (problem/solution) records")
    path = Path(str(tcfg.file)).expanduser()
    if not path.is_absolute():
        path = Path(data_root) / path
    recs = read_records(path)
    return [convert_record(r, f"{path}:{i + 1}") for i, r in enumerate(recs[:n])]


def preset_records(cfg) -> list[dict]:
    """The held-out records a preset's result files are measured on: ``eval.teacher_forced`` of its composed
    ``evaluate`` config (``numlearn.cli.preset_config(experiment, overrides)``; its ``data`` says which training
    data the preset reads). For scripts that re-measure stored runs (``experiments/check_bases.py``,
    ``experiments/del_mechanism.py``): one definition of the records."""
    tcfg = cfg.eval.get("teacher_forced")
    if not tcfg:
        raise ValueError("this preset's eval config sets no teacher_forced records (eval.teacher_forced)")
    return teacher_forced_records(tcfg, cfg.data, Path(str(cfg.paths.data_dir)).expanduser(),
                                  Path(str(cfg.paths.cache_dir)).resolve())


def tf_device(tcfg) -> str:
    """``eval.teacher_forced.device``, or where there is none the GPU if there is one, else the CPU."""
    return str(tcfg.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))


def measure(model_path: str, tcfg, records: list[dict], model=None, tokenizer=None, device: str = "cpu") -> dict:
    """``eval.teacher_forced`` (``tcfg``) on ``records`` (``teacher_forced_records``) with the model at
    ``model_path`` loaded on ``device``, or the given ``model``/``tokenizer`` (the HF backend's, where they are):
    the scalars and the data they came from. ``tcfg.dtype`` null: bfloat16 autocast on a GPU, float32 on a CPU."""
    if model is None or tokenizer is None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    dev = next(model.parameters()).device.type
    dtype = str(tcfg.get("dtype") or ("bfloat16" if dev == "cuda" else "float32"))
    prefix = None
    if pc := tcfg.get("prefix_cache"):
        from .prefix_cache import PrefixLogits

        prefix = PrefixLogits(pc.dir, int(pc.frozen_layers), dtype)
    m = heldout_metrics(model, tokenizer, records, int(tcfg.max_length), int(tcfg.get("batch_size") or 32), dtype,
                        logits_fn=prefix)
    cached = {"prefix_cache": {"frozen_layers": prefix.frozen, "batches_from_cache": prefix.hits,
                               "batches_computed": prefix.misses}} if prefix is not None else {}
    return {**m, "source": str(tcfg.source), **({"file": str(tcfg.file)} if tcfg.get("file") else {}),
            **({"dtype": dtype} if dtype != "float32" else {}), **({"device": dev} if dev != "cpu" else {}), **cached}
