"""The checkpoint probe: ``python -m numlearn.probe model_path=<dir or hub id> [baseline=<dir or hub id>] [key=value ...]``.

Teacher forced on the GSM8K and MATH test solutions (every one by default; ``n=`` cuts each set), it
measures at every digit of the reference solutions what ``numlearn.evaluation.probe`` defines: the raw
digit logits and their gap to the other tokens, the digit softmax's entropy, digit accuracy and NLL per
place, and where each DEL form's gradient would lower the target's probability. With ``baseline=``, the
same for the baseline and model minus baseline, paired over problems (95 % bootstrap intervals).

    python -m numlearn.probe model_path=Zzh-tju/qwen2.5-1.5B baseline=Qwen/Qwen2.5-1.5B      # a GPU: bf16
    python -m numlearn.probe model_path=outputs/.../final baseline=outputs/.../final n=200 datasets=gsm8k

Keys (all optional but ``model_path``): ``baseline``, ``datasets`` (comma-separated benchmark names,
default ``gsm8k,math``), ``n`` (solutions per dataset; default all), ``out`` (default ``outputs/probe``),
``batch_size`` (8), ``max_length`` (1024 tokens), ``dtype`` (``auto``: bf16 on a GPU that has it, else
fp16 on a GPU, fp32 on CPU), ``n_boot`` (2000), ``data_dir`` (``NUMLEARN_DATA_DIR`` or ./data).

Store-backed and resumable: per model and dataset, ``<out>/<model>/<dataset>/probe.jsonl`` (a row of sums
per solution, appended per batch; a re-run measures only what is missing) and ``probe.json`` (the summary,
the command and the provenance); with a baseline, ``<out>/<model>__vs__<baseline>/compare.{json,md}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from numlearn.cli import REPO_ROOT, conf_dir, io_failure, offline_if_hub_unreachable
from numlearn.provenance import model_fingerprint, provenance
from numlearn.records import write_atomic

PROBE_FORMAT = 1


@dataclass
class ProbeConfig:
    model_path: str = ""
    baseline: str | None = None
    datasets: str = "gsm8k,math"
    n: int | None = None
    out: str = "outputs/probe"
    batch_size: int = 8
    max_length: int = 1024
    dtype: str = "auto"
    n_boot: int = 2000
    data_dir: str | None = None

    @classmethod
    def from_args(cls, argv: list[str]) -> ProbeConfig:
        known = {f.name: f for f in fields(cls)}
        kw: dict = {}
        for arg in argv:
            key, eq, value = arg.partition("=")
            if not eq or key not in known:
                raise ValueError(f"{arg!r}: expected key=value with key one of {', '.join(known)}")
            if key in ("n", "batch_size", "max_length", "n_boot"):
                try:
                    kw[key] = None if (key == "n" and value in ("", "null", "all")) else int(value)
                except ValueError:
                    raise ValueError(f"{key}={value!r}: an integer") from None
            else:
                kw[key] = value or None
        cfg = cls(**kw)
        if not cfg.model_path:
            raise ValueError("model_path=<model dir or hub id> is required")
        if cfg.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype={cfg.dtype!r}: one of auto, float32, bfloat16, float16")
        if (cfg.n is not None and cfg.n < 1) or cfg.batch_size < 1 or cfg.max_length < 16:
            raise ValueError("n and batch_size must be >= 1 and max_length >= 16")
        return cfg


def slug(model: str) -> str:
    """A directory name for a model dir or hub id (``Qwen/Qwen2.5-1.5B`` -> ``Qwen--Qwen2.5-1.5B``)."""
    p = Path(model)
    if p.is_dir():
        parts = [x for x in p.resolve().parts if x not in ("/", "final")]
        return "--".join(parts[-3:]).replace("=", "")
    return model.replace("/", "--")


def dataset_records(name: str, data_dir: Path, n: int | None) -> tuple[list[dict], dict]:
    """The ``{"instruction", "output"}`` solutions of benchmark ``name`` (its ``conf/eval/benchmark`` file,
    sha256-checked), the first ``n``, and what they are."""
    from numlearn.data.sources import DataError, convert_record, read_records
    from numlearn.evaluation.benchmarks import resolve_file, sha256_file
    from numlearn.schema import load_benchmark_config

    f = Path(conf_dir()) / "eval" / "benchmark" / f"{name}.yaml"
    if not f.is_file():
        names = sorted(p.stem for p in f.parent.glob("*.yaml"))
        raise ValueError(f"datasets: unknown benchmark {name!r}; choose from {', '.join(names)}")
    bcfg = load_benchmark_config(f)
    path, expected = resolve_file(bcfg, data_dir, REPO_ROOT / "data_cache")
    if not path.is_file():
        raise DataError(f"{name}: {path} not found: fetch the benchmarks with `make data` or pass data_dir=<root>")
    digest = sha256_file(path)
    if expected and digest != expected:
        raise DataError(f"{name}: {path} has sha256 {digest[:12]}..., expected {expected[:12]}...; re-fetch it (make data)")
    recs = read_records(path)[: n or None]
    out = [convert_record(r, f"{path}:{i + 1}") for i, r in enumerate(recs)]
    return out, {"name": name, "file": str(path), "sha256": digest, "n": len(out)}


def _device_dtype(want: str):
    import torch

    if torch.cuda.is_available():
        dev = "cuda"
        auto = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        dev, auto = "cpu", torch.float32
    return dev, (auto if want == "auto" else getattr(torch, want))


def load_model(model: str, dtype: str):
    """Model and tokenizer of a directory or hub id (the real hub path when it is not a directory)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = _device_dtype(dtype)
    try:
        tok = AutoTokenizer.from_pretrained(model)
        m = AutoModelForCausalLM.from_pretrained(model, dtype=dt).to(dev).eval()
    except OSError as e:
        if io_failure(e):
            raise
        first = (str(e).strip().splitlines() or ["?"])[0][:200]
        raise FileNotFoundError(f"model {model!r} could not be loaded ({first}): pass a model directory, or a hub id "
                                "with the network (or its files in the Hugging Face cache)") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return m, tok, str(dt).replace("torch.", "")


def _read_rows(path: Path, key: str) -> dict[int, dict]:
    rows = {}
    if path.exists():
        for line in path.read_text().split("\n"):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interruption: measured again
            if isinstance(r, dict) and r.get("key") == key and isinstance(r.get("index"), int):
                rows[r["index"]] = r
    return rows


def probe_model(model: str, cfg: ProbeConfig, data: dict[str, tuple[list[dict], dict]], say=print) -> dict[str, list]:
    """Measure ``model`` on each dataset (resuming what its ``probe.jsonl`` holds); return the rows per
    dataset, in record order, and write each ``probe.json``."""
    from tqdm import tqdm

    from numlearn.evaluation.probe import probe_rows, summarise
    from numlearn.losses import resolve_vocab
    from numlearn.rundirs import RunDirLock

    loaded = None
    out: dict[str, list] = {}
    for name, (records, info) in data.items():
        d = Path(cfg.out) / slug(model) / name
        jsonl = d / "probe.jsonl"
        with RunDirLock(d / "probe.lock", "probe", "wait for it to finish, then re-run to resume"):
            fp = model_fingerprint(model)
            _, dt = _device_dtype(cfg.dtype)
            key = json.dumps({"format": PROBE_FORMAT, "model": fp, "data": info["sha256"], "max_length": cfg.max_length,
                              "dtype": str(dt)}, sort_keys=True)
            rows = _read_rows(jsonl, key)
            todo = [i for i in range(len(records)) if i not in rows]
            if todo:
                if loaded is None:
                    say(f"[numlearn.probe] loading {model} ({cfg.dtype})")
                    loaded = load_model(model, cfg.dtype)
                m, tok, _ = loaded
                vocab = resolve_vocab(tok)
                t0 = time.time()
                bar = tqdm(total=len(todo), desc=f"{slug(model)}/{name}", file=sys.stderr, mininterval=2.0)
                with open(jsonl, "w" if not rows else "a") as f:  # no row of this key: the file is replaced
                    sub = [records[i] for i in todo]
                    for j, row in probe_rows(m, tok, sub, vocab, cfg.max_length, cfg.batch_size, bar.update):
                        r = {"index": todo[j], "key": key, **row}
                        rows[todo[j]] = r
                        f.write(json.dumps(r) + "\n")
                    f.flush()
                bar.close()
                say(f"[numlearn.probe] {slug(model)}/{name}: {len(todo)} solutions in {time.time() - t0:.1f}s")
            ordered = [rows[i] for i in range(len(records))]
            summary = summarise(ordered, cfg.n_boot)
            write_atomic(d / "probe.json", {"model": model, "fingerprint": fp, "dataset": info, "summary": summary,
                                            "n_resumed": len(records) - len(todo), "config": vars(cfg),
                                            "command": "python -m numlearn.probe " + " ".join(sys.argv[1:]),
                                            **provenance()})
            out[name] = ordered
    return out


_SHOW = (("digit_logit", "mean raw digit logit", 1, 3), ("gap", "digit minus non-digit logit", 1, 3),
         ("digit_mass", "digit share of softmax", 1, 3), ("entropy", "digit entropy (nats)", 1, 3),
         ("correct", "digit accuracy (%)", 100, 1), ("nll", "digit NLL", 1, 3),
         ("lowers_code", "code form lowers target (% positions)", 100, 1),
         ("lowers_weight_code", "code form lowers target (% place weight)", 100, 1),
         ("lowers_paper", "paper form lowers target (% positions)", 100, 1),
         ("lowers_binary_entropy", "binary-entropy form lowers target (% positions)", 100, 1))


def _cell(m: dict | None, scale: float, nd: int) -> str:
    if not m or m["value"] is None:
        return "--"
    s = f"{m['value'] * scale:.{nd}f}"
    return s + (f" [{m['ci'][0] * scale:.{nd}f}, {m['ci'][1] * scale:.{nd}f}]" if m.get("ci") else "")


def report(cfg: ProbeConfig, model_rows: dict, base_rows: dict | None) -> str:
    from numlearn.evaluation.probe import PLACES, compare, summarise

    lines = [f"<!-- generated by python -m numlearn.probe {' '.join(sys.argv[1:])}; do not edit by hand -->",
             f"model: `{cfg.model_path}`" + (f"; baseline: `{cfg.baseline}`" if cfg.baseline else ""), ""]
    result = {}
    for name, rows in model_rows.items():
        s = summarise(rows, cfg.n_boot)
        b = summarise(base_rows[name], cfg.n_boot) if base_rows else None
        c = compare(rows, base_rows[name], cfg.n_boot) if base_rows else None
        result[name] = {"model": s, "baseline": b, "difference": c}
        lines += [f"## {name}: {s['n_problems']} solutions, {s['n_digits']} digits (95 % bootstrap over solutions)", "",
                  "| quantity | model |" + (" baseline | model - baseline |" if b else ""),
                  "|---|---|" + ("---|---|" if b else "")]
        for k, label, scale, nd in _SHOW:
            lines.append(f"| {label} | {_cell(s[k], scale, nd)} |"
                         + (f" {_cell(b[k], scale, nd)} | {_cell(c[k], scale, nd)} |" if b else ""))
        lines += ["", "| place | digits | accuracy (%) | NLL |" + (" accuracy, model - baseline | NLL, model - baseline |"
                                                                 if b else ""),
                  "|---|---|---|---|" + ("---|---|" if b else "")]
        for p in PLACES:
            if p in s["places"]:
                q = s["places"][p]
                row = f"| {p} | {q['n_digits']} | {_place_cell(q, 'correct', 100, '.1f')} | {_place_cell(q, 'nll', 1, '.3f')} |"
                if c and p in c["places"]:
                    d = c["places"][p]
                    row += f" {_place_cell(d, 'correct', 100, '+.1f')} | {_place_cell(d, 'nll', 1, '+.3f')} |"
                lines.append(row)
        lines.append("")
    if base_rows:
        lines += [MIXED_NOTE, ""]
    return "\n".join(lines), result


# what a model-minus-baseline comparison measures, said under every one (issue 59 item 5)
MIXED_NOTE = ("Model minus baseline is whatever differs between the two checkpoints: against a base model it is the "
              "fine-tuning and the loss together; only a twin trained with MLE on the same data, steps and seed "
              "(model and baseline both fine-tunes) isolates the loss. The DEL authors' released checkpoints have no "
              "such twin; conf/study/qwen_coder.yaml trains one for each of its rows (its tuned MLE).")


def _place_cell(q: dict, key: str, scale: float, fmt: str) -> str:
    ci = (q.get("ci") or {}).get(key)
    body = format(q[key] * scale, fmt)
    return body + (f" [{format(ci[0] * scale, fmt)}, {format(ci[1] * scale, fmt)}]" if ci else "")


def run(cfg: ProbeConfig, say=print) -> Path:
    data_dir = Path(cfg.data_dir or os.environ.get("NUMLEARN_DATA_DIR") or REPO_ROOT / "data").expanduser()
    data = {name: dataset_records(name, data_dir, cfg.n) for name in filter(None, cfg.datasets.split(","))}
    if not data:
        raise ValueError("datasets= names no benchmark")
    rows = probe_model(cfg.model_path, cfg, data, say)
    base = probe_model(cfg.baseline, cfg, data, say) if cfg.baseline else None
    text, result = report(cfg, rows, base)
    d = Path(cfg.out) / (slug(cfg.model_path) + (f"__vs__{slug(cfg.baseline)}" if cfg.baseline else ""))
    d.mkdir(parents=True, exist_ok=True)
    write_atomic(d / "compare.json", {"model": cfg.model_path, "baseline": cfg.baseline, "datasets": result,
                                      "config": vars(cfg), **provenance()})
    (d / "compare.md").write_text(text + "\n")
    say(text)
    say(f"[numlearn.probe] wrote {d / 'compare.md'}")
    return d


def main(argv: list[str] | None = None) -> int:
    from numlearn.data.sources import DataError
    from numlearn.losses import TokenizerDigitError
    from numlearn.rundirs import RunDirBusy

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = ProbeConfig.from_args(argv)
        offline_if_hub_unreachable("numlearn.probe")
        run(cfg)
    except (ValueError, DataError, TokenizerDigitError, RunDirBusy, FileNotFoundError) as e:
        print(f"numlearn.probe: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if (line := io_failure(e)) is None:
            raise
        print(f"numlearn.probe: error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
