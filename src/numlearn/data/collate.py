"""Tokenisation with loss on the response only, and the padding collator."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from numlearn.losses.spans import IGNORE_INDEX  # one definition, where the losses read it

from .prompts import TrainingTemplate, training_template

BOUNDARIES = ("split", "joint")


@dataclass
class TokenizeReport:
    n_examples: int = 0
    n_truncated: int = 0
    n_dropped_empty: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"examples": self.n_examples, "truncated": self.n_truncated, "dropped_no_response": self.n_dropped_empty}


def tokenize_records(records, tokenizer, max_length: int, template: TrainingTemplate | None = None,
                     boundary: str = "split"):
    """``{"instruction", "output"[, "input"]}`` records -> list of ``{"input_ids", "labels"}``.

    Target = response + EOS; prompt positions get IGNORE_INDEX. ``boundary``:

    * ``split`` -- prompt and response are tokenised separately and concatenated, so the prompt's
      tokens are exactly what evaluation feeds the model (no token straddles the boundary);
    * ``joint`` -- what the authors' trainers do: ``tok(prompt + response + eos_text)`` with the
      first ``len(tok(prompt))`` tokens masked. Where a token merges the prompt's end with the
      response's start, that token is masked; SentencePiece tokenizers, which give a separately
      tokenised response a leading "▁", give it none here.

    Sequences longer than ``max_length`` are truncated from the right and counted; an example left
    with no response token is dropped and counted.
    """
    if boundary not in BOUNDARIES:
        raise ValueError(f"data.boundary={boundary!r}; choose one of {BOUNDARIES}")
    template = template or training_template("alpaca")
    if not records:
        return [], TokenizeReport()
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("tokenizer has no eos_token; set one (the target is response + EOS)")
    prompts = [template(r["instruction"], r.get("input") or "") for r in records]
    p_ids = tokenizer(prompts, add_special_tokens=True)["input_ids"]
    if boundary == "split":
        r_ids = tokenizer([r["output"] for r in records], add_special_tokens=False)["input_ids"]
        pairs = [(list(p) + list(r) + [eos], len(p)) for p, r in zip(p_ids, r_ids)]
    else:
        full = tokenizer([pr + r["output"] + tokenizer.eos_token for pr, r in zip(prompts, records)],
                         add_special_tokens=True)["input_ids"]
        pairs = [(list(f), len(p)) for f, p in zip(full, p_ids)]
    out, rep = [], TokenizeReport()
    for ids, n_prompt in pairs:
        labels = [IGNORE_INDEX] * min(n_prompt, len(ids)) + ids[n_prompt:]
        if len(ids) > max_length:
            rep.n_truncated += 1
            ids, labels = ids[:max_length], labels[:max_length]
        if all(x == IGNORE_INDEX for x in labels):
            rep.n_dropped_empty += 1
            continue
        out.append({"input_ids": ids, "labels": labels})
    rep.n_examples = len(out)
    return out, rep


class PadCollator:
    """Right-pads ``input_ids`` with the pad id and ``labels`` with IGNORE_INDEX.

    With right padding and causal attention no real token ever attends to a pad, so the
    attention mask can be left out (``with_attention_mask=False``), which lets SDPA take its
    fused causal path -- about 1.5x faster on CPU for the tiny model. Keep it for models whose
    forward uses the mask for anything else.
    """

    def __init__(self, pad_id: int, pad_to_multiple_of: int | None = None, with_attention_mask: bool = True,
                 extra: dict | None = None):
        self.pad_id, self.multiple, self.with_mask = pad_id, pad_to_multiple_of, with_attention_mask
        self.extra = dict(extra or {})  # constant model kwargs, e.g. logits_to_keep=1 for the fused linear loss

    def __call__(self, batch):
        n = max(len(b["input_ids"]) for b in batch)
        if self.multiple:
            n = -(-n // self.multiple) * self.multiple
        ids = torch.full((len(batch), n), self.pad_id, dtype=torch.long)
        labels = torch.full((len(batch), n), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(batch), n), dtype=torch.long)
        for i, b in enumerate(batch):
            L = len(b["input_ids"])
            ids[i, :L] = torch.tensor(b["input_ids"])
            labels[i, :L] = torch.tensor(b["labels"])
            mask[i, :L] = 1
        out = {"input_ids": ids, "labels": labels, **self.extra}
        if self.with_mask:
            out["attention_mask"] = mask
        return out


class PackCollator:
    """Packs a batch's examples into fewer rows: each row holds whole examples back to back, with
    ``position_ids`` restarting at 0 for each, so the model attends within an example only
    (transformers reads restarting positions as packed sequences and builds a block-diagonal
    causal mask). The same examples and the same target tokens as ``PadCollator``, with fewer pad
    positions: the step computes the same loss and gradient up to float rounding.

    Rows are filled first-fit, longest example first, up to ``capacity_factor`` x the batch's
    longest example: 2 removes most padding while keeping each row's attention cost small (one row
    for the whole batch would make attention quadratic in the batch's token count).

    The first label of every example is IGNORE_INDEX: after the causal shift it would be predicted
    from the previous example's last token, a target the padded batch never has. The model must
    be called with ``use_cache=False`` (sent with the batch): with a cache transformers does not
    look for packed sequences and the examples would attend to each other.
    """

    def __init__(self, pad_id: int, capacity_factor: int = 2, extra: dict | None = None):
        if int(capacity_factor) < 1:
            raise ValueError(f"capacity_factor={capacity_factor!r}: a row holds at least the longest example (>= 1)")
        self.pad_id, self.factor = pad_id, int(capacity_factor)
        self.extra = {"use_cache": False, **dict(extra or {})}

    def rows(self, lengths: list[int]) -> list[list[int]]:
        """Example indices per row (first-fit decreasing; ties keep the batch order)."""
        cap = self.factor * max(lengths)
        rows: list[list[int]] = []
        fill: list[int] = []
        for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
            for r, used in enumerate(fill):
                if used + lengths[i] <= cap:
                    rows[r].append(i)
                    fill[r] += lengths[i]
                    break
            else:
                rows.append([i])
                fill.append(lengths[i])
        return rows

    def __call__(self, batch):
        lengths = [len(b["input_ids"]) for b in batch]
        rows = self.rows(lengths)
        n = max(sum(lengths[i] for i in r) for r in rows)
        ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), n), IGNORE_INDEX, dtype=torch.long)
        pos = torch.zeros((len(rows), n), dtype=torch.long)
        for r, members in enumerate(rows):
            o = 0
            for i in members:
                L = lengths[i]
                ids[r, o:o + L] = torch.tensor(batch[i]["input_ids"])
                labels[r, o:o + L] = torch.tensor(batch[i]["labels"])
                labels[r, o] = IGNORE_INDEX
                pos[r, o:o + L] = torch.arange(L)
                o += L
            pos[r, o:] = torch.arange(n - o)  # the tail of pads is a sequence of its own
        return {"input_ids": ids, "labels": labels, "position_ids": pos, **self.extra}
