"""The embedded default tokenizer: byte-level BPE fitted to the synthetic corpus, with every
digit its own token and a bare "." token (as in the paper's model families)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

EOS = "<|endoftext|>"
PAD = "<|pad|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, phrases: tuple[str, ...] = ()):
    """Fit a ``PreTrainedTokenizerFast`` on ``texts``. Deterministic for the same texts.

    ``phrases`` (e.g. the fixed parts of the prompt template) become single added tokens: the
    byte-level pre-tokenizer cannot merge across spaces, and spending 25 tokens of every
    sequence on a constant header would make the CPU default train ~1.4x slower for nothing.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    if phrases:
        from tokenizers import AddedToken

        tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in phrases])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=None,
                                   unk_token=None, model_max_length=2048, padding_side="right")


def cached_tokenizer(texts: list[str], cache_dir: str | Path, vocab_size: int = 512, phrases: tuple[str, ...] = ()):
    """Train once per corpus and cache under ``cache_dir/tokenizer-<hash>``."""
    from transformers import AutoTokenizer

    h = hashlib.sha256()
    h.update(str(vocab_size).encode())
    h.update(repr(tuple(phrases)).encode())
    for t in texts:
        h.update(t.encode())
    path = Path(cache_dir) / f"tokenizer-{h.hexdigest()[:16]}"
    if not (path / "tokenizer.json").exists():
        tok = train_tokenizer(texts, vocab_size, tuple(phrases))
        tmp = path.with_name(path.name + ".tmp")
        tok.save_pretrained(tmp)
        if not path.exists():  # another process may have finished first; its copy is as good
            tmp.replace(path)
    return AutoTokenizer.from_pretrained(path)
