"""Training data sources. Each yields instruction/response records ``{"instruction", "output"}``.

* ``synthetic``: the procedural generator (CoT and PoT target for every problem).
* ``local``: JSON / JSONL files -- GSM8K (question/answer), MATH (problem/solution) and
  MathInstruct-style (instruction/output) records, converted on the fly.
* ``hf``: ``datasets.load_dataset`` (e.g. TIGER-Lab/MathInstruct), for users with a network.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

from .files import DataError, read_records  # noqa: F401 - re-exported: numlearn.data.sources.DataError
from .prompts import POT_SUFFIX
from .synthetic import ensure_synthetic

_CALC = re.compile(r"<<[^>]*>>")


MAX_FIELD_CHARS = 200_000


def _text(rec: dict[str, Any], key: str, where: str, max_chars: int) -> str:
    """A record's text field, as it is: a field of another type (``["a"]``, ``5``) is refused, not
    coerced to ``"['a']"`` / ``"5"``; a field longer than ``max_chars`` is refused before tokenising."""
    v = rec[key]
    if not isinstance(v, str):
        raise DataError(f"malformed training record {where}: field {key!r} is a {type(v).__name__} "
                        f"({str(v)[:40]!r}), expected a string")
    if len(v) > max_chars:
        raise DataError(f"training record {where}: field {key!r} has {len(v):,} characters, over the "
                        f"{max_chars:,} allowed; drop the record or raise data.max_field_chars")
    return v


def convert_record(rec: dict[str, Any], where: str = "", max_chars: int | None = None) -> dict[str, str]:
    """One raw record -> ``{"instruction", "output"}``; raises DataError naming the record."""
    m = max_chars or MAX_FIELD_CHARS

    def t(key):
        return _text(rec, key, where, m)

    if "instruction" in rec and "output" in rec:
        return {"instruction": t("instruction"), "output": t("output")}
    if "question" in rec and "answer" in rec and isinstance(rec["answer"], str) and "####" in rec["answer"]:  # GSM8K
        body, final = t("answer").rsplit("####", 1)
        body = _CALC.sub("", body).strip()
        return {"instruction": t("question"), "output": f"{body}\nThe answer is {final.strip()}."}
    if "problem" in rec and "solution" in rec:  # MATH
        return {"instruction": t("problem"), "output": t("solution")}
    raise DataError(
        f"malformed training record {where}: fields {sorted(rec)}; expected instruction/output "
        "(MathInstruct), question/answer with '####' (GSM8K) or problem/solution (MATH)"
    )


def load_local(path: str | Path, limit: int | None = None, max_chars: int | None = None,
               skip: int | None = None) -> list[dict[str, str]]:
    """The records of one local file, converted: the first ``skip`` left out, then the first ``limit`` kept."""
    skip = int(skip or 0)
    recs = read_records(path)[skip:][: limit or None]
    return [convert_record(r, f"{path}:{skip + i + 1}", max_chars) for i, r in enumerate(recs)]


def load_hf(name: str, split: str = "train", limit: int | None = None, max_chars: int | None = None,
            **kwargs) -> list[dict[str, str]]:
    import datasets

    ds = datasets.load_dataset(name, split=split, **kwargs)
    if limit:
        ds = ds.select(range(min(limit, len(ds))))
    return [convert_record(dict(r), f"{name}[{i}]", max_chars) for i, r in enumerate(ds)]


def pot_share(pot) -> Fraction:
    """``data.pot``: true (every problem also as a PoT example), false (none), or the share of
    problems that get one, in (0, 1]."""
    if isinstance(pot, bool) or pot is None:
        return Fraction(int(bool(pot)))
    try:
        f = Fraction(str(pot))
    except (TypeError, ValueError):
        f = None
    if f is None or not 0 <= f <= 1:
        raise ValueError(f"data.pot={pot!r}: true, false, or the share of problems with a PoT example (0 to 1, "
                         "e.g. 0.25)")
    return f


def synthetic_records(cache_dir: str | Path, n_train: int, seed: int, pot: bool | float = True,
                      difficulty: str | None = None, replay: int = 0) -> list[dict[str, str]]:
    """Every training problem as a CoT example; ``pot`` (``pot_share``) of them also as a PoT
    example, spread evenly (problem i has one when floor((i+1) x share) > floor(i x share)).
    ``difficulty``: a named task variant (``numlearn.data.synthetic.DIFFICULTIES``) instead of the
    base task. ``replay``: that many of the base task's training problems (its first ones, same PoT
    share) spread evenly among the variant's, so a model fine-tuned on the variant keeps seeing the
    task it was trained on (a variant only: replaying the base task into itself would only repeat it)."""
    share = pot_share(pot)
    replay = int(replay or 0)
    if replay < 0:
        raise DataError(f"data.replay={replay}: the number of base-task problems to mix in, >= 0")
    if replay and difficulty in (None, "", "base"):
        raise DataError(f"data.replay={replay} without data.difficulty: replay mixes the base task into a task "
                        "variant's training data; set data.difficulty (e.g. long3) or data.replay=null")

    def examples(path: Path) -> list[list[dict[str, str]]]:
        out = []
        for i, r in enumerate(read_records(path)):
            ex = [{"instruction": r["question"], "output": r["cot"]}]
            if math.floor((i + 1) * share) > math.floor(i * share):
                ex.append({"instruction": r["question"] + POT_SUFFIX, "output": r["pot"]})
            out.append(ex)
        return out

    main = examples(ensure_synthetic(cache_dir, n_train, 0, 0, seed, difficulty=difficulty)["train"])
    if not replay:
        return [e for ex in main for e in ex]
    base = examples(ensure_synthetic(cache_dir, replay, 0, 0, seed)["train"])
    # problem i of a list of n sits at (i + 0.5) / n: the two lists interleave evenly, the variant first on ties
    order = sorted([((i + 0.5) / len(main), 0, i) for i in range(len(main))]
                   + [((j + 0.5) / len(base), 1, j) for j in range(len(base))])
    return [e for _, which, k in order for e in (main if which == 0 else base)[k]]


def gsm8k_with_programs(path: Path, pot, cache_dir: str | Path, limit: int | None = None,
                        max_chars: int | None = None, skip: int | None = None) -> list[dict[str, str]]:
    """A GSM8K file's records with the programs derived from its calculator annotations
    (``numlearn.data.gsm8k_pot``), as MathInstruct mixes CoT and PoT answers. ``pot``: ``"only"`` (each solution's
    program, where one was kept), true (each problem as CoT, then its program), or a share in (0, 1] of the
    problems that also get their program, spread evenly as for the synthetic task (``pot_share``)."""
    from .gsm8k_pot import cached_programs, read_gsm8k

    skip = int(skip or 0)
    try:
        raw = read_gsm8k(path)
    except DataError as e:
        raise DataError(f"data.pot={pot!r} derives programs from GSM8K files: {e}") from None
    programs = cached_programs(path, cache_dir)
    kept = range(skip, min(len(raw), skip + limit) if limit else len(raw))
    if pot == "only":
        return [programs[i] for i in kept if i in programs]
    share, out = pot_share(pot), []
    for i in kept:
        out.append(convert_record(raw[i], f"{path}:{i + 1}", max_chars))
        if i in programs and math.floor((i + 1) * share) > math.floor(i * share):
            out.append(programs[i])
    return out


def load_source(cfg, data_root: str | Path, cache_dir: str | Path) -> list[dict[str, str]]:
    """Records for a ``conf/data/*.yaml`` node."""
    kind = cfg.source
    limit = cfg.get("limit")
    if kind != "synthetic" and (cfg.get("difficulty") or cfg.get("replay")):
        raise DataError(f"data.difficulty / data.replay are options of the synthetic task, not of source={kind!r}; "
                        "remove them (or use data=synthetic)")
    if kind == "synthetic":
        seed, pot = cfg.get("seed"), cfg.get("pot")
        recs = synthetic_records(cache_dir, cfg.n_train, 0 if seed is None else seed, True if pot is None else pot,
                                 difficulty=cfg.get("difficulty"), replay=cfg.get("replay") or 0)
    elif kind == "local":
        recs = []
        for f in cfg.files:
            fp = Path(f) if Path(f).is_absolute() else Path(data_root) / f
            if cfg.get("pot") not in (None, False):  # GSM8K with its derived programs (numlearn.data.gsm8k_pot)
                recs.extend(gsm8k_with_programs(fp, cfg.pot, cache_dir, cfg.get("limit_per_file"),
                                                cfg.get("max_field_chars"), cfg.get("skip_per_file")))
            else:
                recs.extend(load_local(fp, cfg.get("limit_per_file"), cfg.get("max_field_chars"),
                                       cfg.get("skip_per_file")))
    elif kind == "hf":
        recs = load_hf(cfg.hf_name, cfg.get("split") or "train", limit, cfg.get("max_field_chars"),
                       **dict(cfg.get("load_kwargs") or {}))
    else:
        raise DataError(f"unknown data source {kind!r}; choose synthetic, local or hf")
    return recs[:limit] if limit else recs
