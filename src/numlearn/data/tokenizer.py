r"""The embedded default tokenizer: byte-level BPE fitted to the synthetic corpus, with every
digit its own token and a bare "." token (as in the paper's model families).

``digits="chunk3"`` instead groups digits the way Llama-3 does: each run of digits is cut left to
right into chunks of up to three (``\p{N}{1,3}``), and every chunk of 1-3 digits ("7", "07", "007",
"123") is one token -- all 1,110 of them are in the vocabulary, whatever the corpus held."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from numlearn.records import own_tmp

EOS = "<|endoftext|>"
PAD = "<|pad|>"


DIGIT_MODES = ("single", "chunk3")


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, phrases: tuple[str, ...] = (), digits: str = "single"):
    """Fit a ``PreTrainedTokenizerFast`` on ``texts``. Deterministic for the same texts.

    ``phrases`` (e.g. the fixed parts of the prompt template) become single added tokens: the
    byte-level pre-tokenizer cannot merge across spaces, and spending 25 tokens of every
    sequence on a constant header would make the CPU default train ~1.4x slower for nothing.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if digits not in DIGIT_MODES:
        raise ValueError(f"digits={digits!r}; choose one of {DIGIT_MODES}")
    tok = Tokenizer(models.BPE())
    split = (pre_tokenizers.Digits(individual_digits=True) if digits == "single"
             else pre_tokenizers.Split(Regex(r"[0-9]{1,3}"), behavior="isolated"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    if digits == "chunk3":
        tok = _with_every_number_chunk(tok)
    if phrases:
        from tokenizers import AddedToken

        tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in phrases])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=None,
                                   unk_token=None, model_max_length=2048, padding_side="right")


def _with_every_number_chunk(tok):
    """The trained BPE with every digit string of length 1-3 as a token: the learned merges between
    digits are replaced by ``a b`` for each two-digit string and both ``ab c`` and ``a bc`` for each
    three-digit one, so a chunk always ends as one token whatever order the merges fire in."""
    import json

    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    model = spec["model"]
    vocab = model["vocab"]
    def is_digits(t):
        return t.isascii() and t.isdigit()

    merges = [m for m in model["merges"] if not all(is_digits(p) for p in (m if isinstance(m, list) else m.split(" ")))]
    nums = [f"{i:0{n}d}" for n in (1, 2, 3) for i in range(10 ** n)]
    for t in nums:
        if t not in vocab:
            vocab[t] = len(vocab)
    digit_merges = [[t[0], t[1]] for t in nums if len(t) == 2]
    digit_merges += [m for t in nums if len(t) == 3 for m in ([t[:2], t[2]], [t[0], t[1:]])]
    as_str = model["merges"] and isinstance(model["merges"][0], str)
    model["merges"] = merges + ([" ".join(m) for m in digit_merges] if as_str else digit_merges)
    return Tokenizer.from_str(json.dumps(spec))


def cached_tokenizer(texts: list[str], cache_dir: str | Path, vocab_size: int = 512, phrases: tuple[str, ...] = (),
                     digits: str = "single"):
    """Train once per corpus and cache under ``cache_dir/tokenizer-<hash>``."""
    from transformers import AutoTokenizer

    h = hashlib.sha256()
    h.update(str(vocab_size).encode())
    h.update(repr(tuple(phrases)).encode())
    if digits != "single":  # the default's cache key is unchanged
        h.update(digits.encode())
    for t in texts:
        h.update(t.encode())
    path = Path(cache_dir) / f"tokenizer-{h.hexdigest()[:16]}"
    if not (path / "tokenizer.json").exists():
        tok = train_tokenizer(texts, vocab_size, tuple(phrases), digits)
        # every rank of a multi-process run (and every job of a multirun) may train it at once: each saves
        # into its own directory and renames it into place, so no reader sees another's half-written files
        tmp = own_tmp(path)
        tok.save_pretrained(tmp)
        try:
            os.rename(tmp, path)
        except OSError:  # another process renamed its copy first (the same corpus: the same tokenizer)
            if not (path / "tokenizer.json").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(path)
