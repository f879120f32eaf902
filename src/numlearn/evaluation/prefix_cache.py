"""The teacher-forced pass of a top-layer fine-tune, from cached hidden states of its frozen layers.

A fine-tune with ``train.trainable_layers: n`` changes only the top ``n`` decoder layers and the final norm: the
embeddings and the bottom ``L = layers - n`` decoder layers are the base model's, so their output on the same
batches is the same for every model of a study. ``PrefixLogits`` keeps that output per batch on disk (the input of
decoder layer ``L``, ``hidden_states[L]``) and computes each model's logits from it through its own top layers, the
norm and the head (``inputs_embeds`` into the model with its layer list cut to the top): about ``n / layers`` of the
forward. The cache is keyed by the sha256 of the frozen parameters themselves (embeddings and layers ``< L``), the
batches' token ids and the autocast dtype, so a model whose lower layers differ -- or a wrong ``frozen_layers`` --
never reads another model's states: it computes (and stores) its own.

    eval.teacher_forced.prefix_cache: {dir: outputs/tf_prefix, frozen_layers: 20}
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch


def _decoder(model):
    """The module holding the decoder layer list (``model.model`` for the HF causal LMs) and the list."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"eval.teacher_forced.prefix_cache: {type(model).__name__} has no decoder layer list "
                         "(model.model.layers); set prefix_cache: null")
    return inner, layers


def frozen_key(model, frozen_layers: int) -> str:
    """sha256 of the input embeddings' and the bottom ``frozen_layers`` decoder layers' parameters (names, shapes,
    bytes): equal exactly when those weights are equal."""
    inner, layers = _decoder(model)
    if not 1 <= frozen_layers < len(layers):
        raise ValueError(f"eval.teacher_forced.prefix_cache.frozen_layers={frozen_layers}: the model has {len(layers)} "
                         f"decoder layers; give 1..{len(layers) - 1} (the layers a top-layer fine-tune left frozen)")
    h = hashlib.sha256()
    parts = [("embed", inner.get_input_embeddings())] + [(f"layer{i}", layers[i]) for i in range(frozen_layers)]
    for name, module in parts:
        for pname, p in module.named_parameters():
            t = p.detach().contiguous().cpu()
            h.update(f"{name}.{pname}:{tuple(t.shape)}:{t.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:20]


class PrefixLogits:
    """``(model, batch) -> logits`` for ``teacher_forced_digits``: the frozen layers' output from the cache where
    it is there for this model's frozen weights and this batch, else from a full forward (which fills the cache).
    ``hits`` / ``misses`` count batches."""

    def __init__(self, cache_dir: str | Path, frozen_layers: int, dtype: str = "float32"):
        self.dir, self.frozen, self.dtype = Path(cache_dir), int(frozen_layers), str(dtype)
        self.hits = self.misses = 0
        self._key: str | None = None

    def _path(self, model, batch: dict) -> Path:
        if self._key is None:
            self._key = frozen_key(model, self.frozen)
        ids = hashlib.sha256(batch["input_ids"].cpu().numpy().tobytes()
                             + batch["attention_mask"].cpu().numpy().tobytes()).hexdigest()[:20]
        return self.dir / f"{self._key}-L{self.frozen}-{self.dtype}" / f"{ids}.pt"

    def __call__(self, model, batch: dict) -> torch.Tensor:
        path = self._path(model, batch)
        am = batch["attention_mask"]
        if path.is_file():
            self.hits += 1
            hidden = torch.load(path, map_location=am.device, weights_only=True)
            inner, layers = _decoder(model)
            try:
                inner.layers = torch.nn.ModuleList(list(layers)[self.frozen:])
                return model(inputs_embeds=hidden, attention_mask=am).logits
            finally:
                inner.layers = layers
        self.misses += 1
        out = model(input_ids=batch["input_ids"], attention_mask=am, output_hidden_states=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(out.hidden_states[self.frozen].detach().cpu(), tmp)
        tmp.replace(path)  # atomic: an interrupted write leaves no half file to read
        return out.logits
