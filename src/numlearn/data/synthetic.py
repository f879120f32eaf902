"""Seeded, procedural number-heavy math word problems with worked solutions.

The embedded default data set: it runs everywhere (no download) and exercises what the numeric
losses are about -- integers of several lengths, decimals, money and units, and multi-step chains
whose intermediate results are written out. Each problem has a chain-of-thought (CoT) solution
that works every operation out column by column (``worked``) and ends in "The answer is N.", and a
program-of-thought (PoT) solution that prints the answer.

Splits are disjoint by construction: a problem's *key* (template and numbers, not the filler
words) is hashed, and the hash decides which split may hold it (``test`` keys never appear in
``train``; nor do ``val`` keys, the split loss weights are chosen on). ``test_ood`` uses operands
with more digits than any training problem. The same seed always gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from numlearn.records import own_tmp, write_via_tmp

log = logging.getLogger("numlearn.data")

SPLITS = ("train", "val", "test", "test_ood")
# Percentages of the in-distribution key space reserved for the test split (buckets 0-9) and the
# validation split (10-19) on which loss weights are chosen; training draws from the rest.
TEST_BUCKETS = 10
VAL_BUCKETS = 10

NAMES = ["Ann", "Ben", "Cara", "Dan", "Eva", "Finn", "Gia", "Hugo", "Ivy", "Jon", "Kim", "Leo", "Mia", "Nora",
         "Omar", "Pia", "Raj", "Sara", "Tom", "Uma", "Vic", "Wes", "Zoe"]
ITEMS = ["apples", "books", "stickers", "marbles", "cards", "pens", "shells", "coins", "stamps", "eggs"]
GOODS = ["notebook", "pen", "lamp", "cup", "ticket", "sandwich", "shirt", "toy", "plant", "mug"]
UNITS = [("km", "runs"), ("kg", "picks"), ("liters", "pours"), ("meters", "walks")]
CONTAINERS = ["boxes", "bags", "crates", "shelves", "packs"]


@dataclass(frozen=True)
class Difficulty:
    """Operand sizes. ``int_digits`` bounds the digits of integer operands; ``frac_digits`` the
    decimals of money/units; ``mult_max`` the single-digit multiplier."""

    int_digits: tuple[int, int] = (1, 2)
    frac_digits: int = 2
    money_int_digits: tuple[int, int] = (1, 1)
    mult_max: int = 9


IN_DIST = Difficulty()
OOD = Difficulty(int_digits=(2, 3), money_int_digits=(2, 2))
# Named task variants (``data.difficulty``, a benchmark's ``generator.difficulty``): the same templates
# and splitting rule with other operand sizes, each its own stream and its own cache folder, so the
# base task's files stay byte for byte what they were. ``long3``: three-digit integers and two-digit
# money throughout, the shifted target task a base model trained on the base task is fine-tuned on
# (issue 27, "a pretrained start": conf/experiment/pretrained_tiny.yaml).
DIFFICULTIES: dict[str, Difficulty] = {"long3": Difficulty(int_digits=(3, 3), money_int_digits=(2, 2))}


def difficulty_of(name: str | None) -> Difficulty | None:
    """The named variant's operand sizes; None for the base task (``name`` null or empty)."""
    if name in (None, "", "base"):
        return None
    if name not in DIFFICULTIES:
        raise ValueError(f"unknown synthetic difficulty {name!r}: choose one of {sorted(DIFFICULTIES)} "
                         "(or null for the base task)")
    return DIFFICULTIES[name]


@dataclass(frozen=True)
class SyntheticProblem:
    id: str
    split: str
    template: str
    question: str
    cot: str
    pot: str
    answer: str
    key: str


def fmt_num(x: Decimal | int) -> str:
    """Canonical answer string: no exponent, no trailing zeros ("5.50" -> "5.5", "5.0" -> "5")."""
    d = Decimal(x)
    s = format(d.normalize(), "f") if d == d.to_integral_value() else format(d, "f").rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _int(rng: random.Random, digits: tuple[int, int]) -> int:
    n = rng.randint(*digits)
    lo = 10 ** (n - 1) if n > 1 else 1
    return rng.randint(lo, 10**n - 1)


def _money(rng: random.Random, d: Difficulty) -> Decimal:
    whole = _int(rng, d.money_int_digits)
    cents = rng.randint(0, 10**d.frac_digits - 1)
    return Decimal(whole) + Decimal(cents) / (10**d.frac_digits)


def _m(x: Decimal) -> str:
    return format(x.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP), "f")


# Column arithmetic written out (the scratchpad): one single-digit step per position, least
# significant first, with the carry or borrow made explicit -- the intermediate digits a small model
# can learn in a few minutes, and the digits the numeric losses act on. A shorter operand is padded
# with 0s; decimals are aligned on the point.
def _aligned(x: str, y: str) -> tuple[list[int], list[int], int]:
    """Digits of ``x`` and ``y`` least significant first, padded to one length, and the number of
    fractional digits."""
    xi, _, xf = x.partition(".")
    yi, _, yf = y.partition(".")
    f = max(len(xf), len(yf))
    xf, yf = xf.ljust(f, "0"), yf.ljust(f, "0")
    n = max(len(xi), len(yi))
    xs, ys = (xi.rjust(n, "0") + xf)[::-1], (yi.rjust(n, "0") + yf)[::-1]
    return [int(c) for c in xs], [int(c) for c in ys], f


def _compose(out: list[int], f: int) -> str:
    """Result digits (least significant first) with ``f`` fractional digits -> "12.05"."""
    s = "".join(str(d) for d in reversed(out))
    whole, frac = s[: len(s) - f] if f else s, s[len(s) - f :] if f else ""
    whole = whole.lstrip("0") or "0"
    return f"{whole}.{frac}" if f else whole


def column_add(x: str, y: str) -> tuple[list[str], str]:
    a, b, f = _aligned(x, y)
    steps, out, carry = [], [], 0
    for da, db in zip(a, b):
        s = da + db + carry
        steps.append(f"{da} + {db}{' + 1' if carry else ''} = {s}")
        out.append(s % 10)
        carry = s // 10
    if carry:
        out.append(carry)
    return steps, _compose(out, f)


def column_sub(x: str, y: str) -> tuple[list[str], str]:
    """``x - y`` for x >= y: a borrowed-from digit is written already reduced by the borrow."""
    a, b, f = _aligned(x, y)
    steps, out, borrow = [], [], 0
    for da, db in zip(a, b):
        top = da - borrow
        borrow = int(top < db)
        top += 10 * borrow
        steps.append(f"{top} - {db} = {top - db}")
        out.append(top - db)
    if borrow:
        raise ValueError(f"column_sub needs x >= y: {x} - {y}")
    return steps, _compose(out, f)


def column_mul(k: int, x: str) -> tuple[list[str], str]:
    """single digit ``k`` times the integer ``x``."""
    steps, out, carry = [], [], 0
    for d in (int(c) for c in reversed(x)):
        p = k * d + carry
        steps.append(f"{k} * {d}{f' + {carry}' if carry else ''} = {p}")
        out.append(p % 10)
        carry = p // 10
    while carry:
        out.append(carry % 10)
        carry //= 10
    return steps, _compose(out, 0)


_COLUMN = {"+": column_add, "-": column_sub}


def worked(x: str, op: str, y: str, expect: str) -> str:
    """One written-out operation: "47 + 35: 7 + 5 = 12, 4 + 3 + 1 = 8, so 82." (a one-column
    operation is just "7 + 5 = 12."). The result is checked against ``expect`` (computed
    independently with Decimal)."""
    steps, r = column_mul(int(x), y) if op == "*" else _COLUMN[op](x, y)
    if r != expect:
        raise AssertionError(f"column arithmetic {x} {op} {y} gave {r}, expected {expect}")
    if len(steps) == 1:
        return f"{x} {op} {y} = {r}."
    return f"{x} {op} {y}: {', '.join(steps)}, so {r}."


# Each template: rng, difficulty -> (key numbers, question, cot, pot, answer)
def t_total(rng, d):
    a, b = _int(rng, d.int_digits), _int(rng, d.int_digits)
    name, (unit, verb) = rng.choice(NAMES), rng.choice(UNITS)
    q = f"{name} {verb} {a} {unit} on Monday and {b} {unit} on Tuesday. How many {unit} is that in total?"
    cot = f"{worked(str(a), '+', str(b), str(a + b))} The answer is {a + b}."
    pot = f"monday = {a}\ntuesday = {b}\nprint(monday + tuesday)"
    return (a, b), q, cot, pot, fmt_num(a + b)


def t_chain(rng, d):
    a = _int(rng, d.int_digits)
    b = rng.randint(1, a) if a > 1 else 1
    c = _int(rng, d.int_digits)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    x, y = a - b, a - b + c
    q = f"{name} has {a} {item}. {name} gives away {b} and then gets {c} more. How many {item} does {name} have now?"
    cot = f"{worked(str(a), '-', str(b), str(x))} {worked(str(x), '+', str(c), str(y))} The answer is {y}."
    pot = f"start = {a}\ngiven = {b}\nextra = {c}\nprint(start - given + extra)"
    return (a, b, c), q, cot, pot, fmt_num(y)


def t_groups(rng, d):
    a, b = rng.randint(2, d.mult_max), _int(rng, d.int_digits)
    name, item, box = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(CONTAINERS)
    q = f"{name} has {a} {box} with {b} {item} in each. How many {item} are there?"
    cot = f"{worked(str(a), '*', str(b), str(a * b))} The answer is {a * b}."
    pot = f"groups = {a}\neach = {b}\nprint(groups * each)"
    return (a, b), q, cot, pot, fmt_num(a * b)


def t_price(rng, d):
    a, b = _money(rng, d), _money(rng, d)
    g1, g2 = rng.sample(GOODS, 2)
    s = a + b
    q = f"A {g1} costs ${_m(a)} and a {g2} costs ${_m(b)}. How much do they cost together in dollars?"
    cot = f"{worked(_m(a), '+', _m(b), _m(s))} The answer is {fmt_num(s)}."
    pot = f"first = {_m(a)}\nsecond = {_m(b)}\nprint(round(first + second, 2))"
    return (a, b), q, cot, pot, fmt_num(s)


def t_change(rng, d):
    price = _money(rng, d)
    bill = next(v for v in (5, 10, 20, 50, 100, 500, 1000, 5000) if v > price)
    name, good = rng.choice(NAMES), rng.choice(GOODS)
    ch = Decimal(bill) - price
    q = f"{name} buys a {good} for ${_m(price)} and pays with a ${bill} bill. How much change does {name} get in dollars?"
    cot = f"{worked(_m(Decimal(bill)), '-', _m(price), _m(ch))} The answer is {fmt_num(ch)}."
    pot = f"paid = {bill}\nprice = {_m(price)}\nprint(round(paid - price, 2))"
    return (price, bill), q, cot, pot, fmt_num(ch)


def t_measure(rng, d):
    a = Decimal(_int(rng, d.int_digits)) + Decimal(rng.randint(1, 9)) / 10
    b = Decimal(_int(rng, d.int_digits)) + Decimal(rng.randint(1, 9)) / 10
    if b > a:
        a, b = b, a
    unit, _ = rng.choice(UNITS)
    name = rng.choice(NAMES)
    q = f"A tank holds {a} {unit}. {name} takes out {b} {unit}. How many {unit} are left?"
    r = a - b
    cot = f"{worked(str(a), '-', str(b), str(r))} The answer is {fmt_num(r)}."
    pot = f"total = {a}\ntaken = {b}\nprint(round(total - taken, 1))"
    return (a, b), q, cot, pot, fmt_num(r)


TEMPLATES: dict[str, Callable] = {
    "total": t_total, "chain": t_chain, "groups": t_groups,
    "price": t_price, "change": t_change, "measure": t_measure,
}


def _bucket(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 100


def _split_of_bucket(b: int) -> str:
    return "test" if b < TEST_BUCKETS else "val" if b < TEST_BUCKETS + VAL_BUCKETS else "train"


def _max_int_digits(nums) -> int:
    return max(len(str(int(abs(n)))) for n in nums if not isinstance(n, int) or n < 10**9)


def iter_problems(split: str, seed: int = 0, difficulty: Difficulty | None = None,
                  variant: str | None = None) -> Iterator[SyntheticProblem]:
    """Endless stream of unique problems of ``split`` (deterministic in ``seed``). ``variant``: a
    named task variant (``DIFFICULTIES``), drawn from its own random stream; its splits are disjoint
    by the same key hash, and it has no ``test_ood`` split."""
    if split not in SPLITS:
        raise ValueError(f"unknown synthetic split {split!r}; choose one of {SPLITS}")
    stream = f"numlearn-synthetic/{seed}/{split}"
    if variant not in (None, "", "base"):
        if split == "test_ood":
            raise ValueError(f"synthetic difficulty {variant!r} has no test_ood split (its operands are its own "
                             "distribution): evaluate on its test split")
        difficulty, stream = difficulty_of(variant), f"{stream}/{variant}"
    diff = difficulty or (OOD if split == "test_ood" else IN_DIST)
    rng = random.Random(stream)
    names = sorted(TEMPLATES)
    seen: set[str] = set()
    misses = 0
    while True:
        tname = names[rng.randrange(len(names))]
        nums, q, cot, pot, ans = TEMPLATES[tname](rng, diff)
        key = f"{tname}|" + "|".join(str(n) for n in nums)
        if split == "test_ood":
            # longer numbers than any in-distribution problem can have: disjoint by construction
            wanted = _max_int_digits(nums) > max(IN_DIST.int_digits[1], IN_DIST.money_int_digits[1])
        else:
            wanted = _split_of_bucket(_bucket(key)) == split
        if not wanted or key in seen:
            misses += 1
            if misses > 1_000_000:
                raise RuntimeError(f"synthetic split {split!r}: key space exhausted; lower n or raise difficulty")
            continue
        seen.add(key)
        yield SyntheticProblem(f"{split}-{len(seen) - 1:06d}", split, tname, q, cot, pot, ans, key)


def generate(split: str, n: int, seed: int = 0, difficulty: Difficulty | None = None,
             variant: str | None = None) -> list[SyntheticProblem]:
    it = iter_problems(split, seed, difficulty, variant)
    return [next(it) for _ in range(n)]


def write_split(path: str | Path, problems: list[SyntheticProblem]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps(asdict(p), sort_keys=True, ensure_ascii=False) + "\n")
    return path


def _source_key() -> str:
    import hashlib

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


# Hashed once, when the module is imported: the key must name the code this process runs. Hashing
# the file at call time let a long-running process whose source was edited on disk store splits
# made by its old code under the new code's key (a training run's held-out split did exactly that).
_GENERATOR_KEY = _source_key()


def generator_key() -> str:
    """Identity of the generator's code as loaded: caches are keyed by it, so a changed generator
    never reuses splits an earlier version wrote."""
    return _GENERATOR_KEY


def ensure_synthetic(root: str | Path, n_train: int, n_test: int, n_ood: int, seed: int = 0,
                     n_val: int = 0, difficulty: str | None = None) -> dict[str, Path]:
    """Write (once) ``<root>/synthetic/<generator key>/seed=<seed>/<split>-<n>.jsonl`` for each split
    with n > 0 and return their paths; a named ``difficulty`` (``DIFFICULTIES``) writes under
    ``<generator key>/<difficulty>/seed=<seed>``. A cached file is reused only when its sha256 matches
    the one recorded beside it when it was written; otherwise it is regenerated (one line on stderr)."""
    import hashlib

    variant = None if difficulty in (None, "", "base") else str(difficulty)
    if variant is not None:
        difficulty_of(variant)  # an unknown name fails here, before anything is written
        if n_ood > 0:
            raise ValueError(f"synthetic difficulty {variant!r} has no test_ood split: ask for n_ood=0")
    out = Path(root) / "synthetic" / generator_key() / (variant or "") / f"seed={seed}"
    paths = {}
    for split, n in (("train", n_train), ("val", n_val), ("test", n_test), ("test_ood", n_ood)):
        if n <= 0:
            continue
        p = out / f"{split}-{n}.jsonl"
        digest = p.with_name(p.name + ".sha256")
        if p.exists():
            ok = digest.exists() and hashlib.sha256(p.read_bytes()).hexdigest() == digest.read_text().strip()
            if not ok:
                log.warning("cached split %s fails its checksum; regenerating it", p)
                p.unlink()
        if not p.exists():
            # several processes may generate the same split at once (make reproduce-table1 JOBS=2):
            # each writes its own temporary files and renames them into place; the bytes are equal
            tmp = own_tmp(p)
            write_split(tmp, generate(split, n, seed, variant=variant))
            sha = hashlib.sha256(tmp.read_bytes()).hexdigest() + "\n"
            write_via_tmp(digest, lambda t, sha=sha: t.write_text(sha))
            tmp.replace(p)
        paths[split] = p
    return paths


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Write the synthetic splits as JSONL.")
    ap.add_argument("--out", default="data_cache")
    ap.add_argument("--n-train", type=int, default=20000)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--n-ood", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--difficulty", default=None, help=f"a task variant: {', '.join(sorted(DIFFICULTIES))}")
    a = ap.parse_args(argv)
    n_ood = 0 if a.difficulty else a.n_ood
    for split, p in ensure_synthetic(a.out, a.n_train, a.n_test, n_ood, a.seed, difficulty=a.difficulty).items():
        print(split, p)


if __name__ == "__main__":
    main()
