"""Benchmarks described as data (``conf/eval/benchmark/*.yaml``): where the file is, how to read
it, and its checksum. A missing or altered file is an error that says where to get it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from numlearn.data.sources import DataError, read_records
from numlearn.rundirs import file_sha256

from .extract import last_boxed, strict_truth
from .spec import BenchmarkSpec


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str  # ground truth as the strict protocol compares it
    raw_answer: str | None = None  # the loader's answer, before any protocol's normalisation

    def __post_init__(self):
        if self.raw_answer is None:
            object.__setattr__(self, "raw_answer", self.answer)


sha256_file = file_sha256  # the one file hash (numlearn.rundirs), under the name the evaluator's callers use


# A loader turns one record of a benchmark file into (id, question, raw answer). Adding a
# benchmark in an existing file format is one YAML; a new format adds one function here.
LOADERS: dict[str, Callable[[int, dict], tuple[str, str, object]]] = {}


def loader(name: str):
    def register(fn):
        LOADERS[name] = fn
        return fn

    return register


def _choices_text(letters_and_texts) -> str:
    return "\nAnswer Choices: " + " ".join(f"({k}) {v}" for k, v in letters_and_texts)


@loader("gsm8k")
def _gsm8k(i, r):
    return str(i), r["question"].strip(), r["answer"].split("#### ")[-1].replace(",", "")


@loader("svamp")
def _svamp(i, r):
    return str(r.get("ID", i)), f"{r['Body'].strip()} {r['Question'].strip()}", str(r["Answer"])


@loader("question_answer")
def _question_answer(i, r):
    return str(i), r["question"], str(r["answer"])


@loader("math")
def _math(i, r):
    ans = last_boxed(r["solution"])
    if ans is None:
        raise KeyError("no \\boxed{} answer in solution")
    return str(r.get("idx", i)), r["problem"], ans


@loader("aqua")
def _aqua(i, r):
    # the official loader's formatting, byte for byte (it rewrites every "(" and ")" of the options)
    choice = ("(" + "(".join(r["options"])).replace("(", " (").replace(")", ") ")
    return str(i), r["question"].strip() + "\n" + "Answer Choices:" + choice, r["correct"]


@loader("mmlu")
def _mmlu(i, r):
    return str(i), r["question"] + _choices_text(zip("ABCD", r["choices"])), "ABCD"[int(r["answer"])]


@loader("synthetic")
def _synthetic(i, r):
    return r["id"], r["question"], r["answer"]


def _load_records(name: str, loader_name: str, recs: list[dict]) -> list[tuple[str, str, object]]:
    """-> [(id, question, raw answer)]"""
    if loader_name not in LOADERS:
        raise DataError(f"benchmark {name!r}: unknown loader {loader_name!r}; registered: {sorted(LOADERS)}")
    fn, out = LOADERS[loader_name], []
    for i, r in enumerate(recs):
        try:
            out.append(fn(i, r))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise DataError(f"benchmark {name!r}: malformed record {i} ({type(e).__name__}: {e}); "
                            f"fields present: {sorted(r) if isinstance(r, dict) else type(r).__name__}") from None
    return out


def resolve_file(bcfg, data_root: str | Path, cache_dir: str | Path) -> tuple[Path, str | None]:
    if bcfg.get("generator"):
        from numlearn.data.synthetic import ensure_synthetic

        g = bcfg.generator
        n = int(g.n)
        kwargs = {"n_train": 0, "n_val": 0, "n_test": 0, "n_ood": 0}
        split_arg = {"train": "n_train", "val": "n_val", "test": "n_test", "test_ood": "n_ood"}
        if g.split not in split_arg:
            raise DataError(f"synthetic generator split {g.split!r}; choose one of {sorted(split_arg)}")
        kwargs[split_arg[g.split]] = n
        try:
            paths = ensure_synthetic(cache_dir, seed=int(g.seed or 0), difficulty=g.get("difficulty"), **kwargs)
        except ValueError as e:  # an unknown difficulty, or test_ood of a variant
            raise DataError(f"benchmark {bcfg.get('name')!r}: {e}") from None
        return paths[g.split], None
    root = Path(data_root)
    if not root.is_dir():
        raise DataError(f"data root {root} does not exist: set paths.data_dir=<dir> (or NUMLEARN_DATA_DIR) to the "
                        "folder holding benchmarks/, or fetch the data with `make data`")
    return root / bcfg.file, bcfg.get("sha256")


def check_limit(limit) -> int | None:
    """``eval.limit``: null (every problem) or a positive number of problems; 0 or a negative number is
    an error (``rows[:-1]`` would silently drop the last problem, ``rows[:0]`` read as "no limit")."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"eval.limit={limit!r}: give a positive number of problems, or null for all of them")
    return limit


def load_benchmark(bcfg, data_root: str | Path, cache_dir: str | Path, limit: int | None = None,
                   verify: bool = True) -> tuple[list[Problem], dict]:
    limit = check_limit(limit)
    spec = BenchmarkSpec.from_config(bcfg)
    path, expected = resolve_file(bcfg, data_root, cache_dir)
    if not path.exists():
        raise DataError(f"benchmark {bcfg.name!r}: file {path} not found; get it with `make data` (source: "
                        f"{bcfg.get('url', 'see conf/eval/benchmark')}) or set paths.data_dir")
    digest = sha256_file(path)
    if verify and expected and digest != expected:
        raise DataError(f"benchmark {bcfg.name!r}: {path} has sha256 {digest[:12]}..., expected {expected[:12]}... "
                        "(file altered or a different version); re-fetch it with `make data`")
    rows = _load_records(spec.name, spec.loader, read_records(path))
    if bcfg.get("records") and len(rows) != int(bcfg.records):
        raise DataError(f"benchmark {bcfg.name!r}: {len(rows)} records, expected {bcfg.records}")
    if limit:
        rows = rows[: int(limit)]
    problems = [Problem(pid, q, strict_truth(spec, a), str(a)) for pid, q, a in rows]
    info = {"name": spec.name, "file": str(path), "sha256": digest, "records_total": len(rows) if not limit else None,
            "n_evaluated": len(problems), "version": bcfg.get("version"), "kind": spec.answer,
            "loader": spec.loader, "spec": asdict(spec)}
    return problems, info
