"""A benchmark, described as data: one ``conf/eval/benchmark/<name>.yaml`` becomes one
``BenchmarkSpec``, and everything downstream -- the loader, the prompt (multiple choice is primed),
extraction, comparison, metrics -- reads this spec, never the benchmark's name.

YAML keys (their schema: ``numlearn.schema.BenchmarkConfig``, the one the evaluator, ``make data`` and the
probe read): ``name``, ``loader`` (a function registered in ``numlearn.evaluation.benchmarks``),
``answer`` (``number`` | ``math`` | ``choice``), ``choice_letters`` (choice only), ``triggers``
(answer triggers beyond "The answer is:" / "The answer is" / "the answer is", e.g. GSM8K's "####"),
``max_new_tokens``, and where the data is: ``file`` + ``sha256`` + ``records`` (+ ``version``,
``url``), or ``generator`` for the synthetic splits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

ANSWER_KINDS = ("number", "math", "choice")
BASE_TRIGGERS = ("The answer is:", "The answer is", "the answer is")


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    loader: str
    answer: str
    choice_letters: str = ""
    triggers: tuple[str, ...] = ()
    max_new_tokens: int = 1500

    def __post_init__(self):
        if self.answer not in ANSWER_KINDS:
            raise ValueError(f"benchmark {self.name!r}: answer={self.answer!r}; choose one of {ANSWER_KINDS}")
        if self.answer == "choice" and not self.choice_letters:
            raise ValueError(f"benchmark {self.name!r}: answer=choice needs choice_letters (e.g. ABCDE)")

    def modes(self, requested) -> list[str]:
        """The modes this benchmark is evaluated in: a multiple-choice answer has no program to run, so its
        ``pot`` is ``cot`` (``[cot, pot]`` -> ``[cot]``; ``[cot, pot, paper]`` -> ``[cot, paper]``, where ``paper`` is
        the primed CoT the paper runs on multiple choice)."""
        modes = list(requested)
        if self.answer != "choice" or "pot" not in modes:
            return modes
        return list(dict.fromkeys("cot" if m == "pot" else m for m in modes))

    @property
    def all_triggers(self) -> tuple[str, ...]:
        return BASE_TRIGGERS + tuple(self.triggers)

    @classmethod
    def from_config(cls, bcfg) -> BenchmarkSpec:
        get = bcfg.get if hasattr(bcfg, "get") else lambda k, d=None: getattr(bcfg, k, d)
        missing = [k for k in ("name", "loader", "answer") if not get(k)]
        if missing:
            raise ValueError(f"benchmark config {get('name', '?')!r} lacks {missing}")
        return cls(name=str(get("name")), loader=str(get("loader")), answer=str(get("answer")),
                   choice_letters=str(get("choice_letters") or ""), triggers=tuple(get("triggers") or ()),
                   max_new_tokens=int(get("max_new_tokens") or 1500))


# Benchmarks resolvable by name (``as_spec("gsm8k")``). Library code never reads ``conf/``: the entry points and
# scripts register what the CLI layer composed or read (``numlearn.cli.benchmark_configs()``), and a caller can
# register its own. The paper's seven ship with the package (``paper_benchmarks.json``, derived from
# ``conf/eval/benchmark`` by ``python tools/paper_benchmarks.py --write``): an installed library knows them by name.
_REGISTERED: dict[str, BenchmarkSpec] = {}
PAPER_BENCHMARKS = ("gsm8k", "svamp", "simuleq", "math", "aqua", "sat", "mmlu_mathematics")
PACKAGED_FILE = "paper_benchmarks.json"
_SPEC_FIELDS = ("name", "loader", "answer", "choice_letters", "triggers", "max_new_tokens")


def spec_record(spec: BenchmarkSpec) -> dict:
    """A spec as the packaged file stores it (JSON: triggers as a list)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in ((k, getattr(spec, k)) for k in _SPEC_FIELDS)}


@functools.lru_cache(maxsize=1)
def packaged_specs() -> dict[str, BenchmarkSpec]:
    """The paper's seven benchmarks as the package ships them (no clone, no registration needed); read once, not
    on every ``extract_answer`` call."""
    import json
    from importlib import resources

    data = json.loads(resources.files("numlearn.evaluation").joinpath(PACKAGED_FILE).read_text(encoding="utf-8"))
    return {r["name"]: BenchmarkSpec(**{**r, "triggers": tuple(r["triggers"])}) for r in data["benchmarks"]}


def register_benchmarks(benchmarks) -> list[BenchmarkSpec]:
    """Make benchmarks resolvable by name: each a ``BenchmarkSpec`` or a benchmark config node
    (``numlearn.schema.BenchmarkConfig``; in a clone ``numlearn.cli.benchmark_configs()`` reads every
    ``conf/eval/benchmark`` file). A later registration of a name replaces the earlier one."""
    specs = [b if isinstance(b, BenchmarkSpec) else BenchmarkSpec.from_config(b) for b in benchmarks]
    _REGISTERED.update({s.name: s for s in specs})
    return specs


def as_spec(benchmark: str | BenchmarkSpec) -> BenchmarkSpec:
    """A spec, or the registered spec of that name (``register_benchmarks``), else the packaged one of the paper's
    seven."""
    if isinstance(benchmark, BenchmarkSpec):
        return benchmark
    name = str(benchmark)
    if name not in _REGISTERED and name in PAPER_BENCHMARKS:
        return packaged_specs()[name]
    if name not in _REGISTERED:
        known = ", ".join(sorted({*_REGISTERED, *PAPER_BENCHMARKS}))
        raise ValueError(f"unknown benchmark {name!r} (registered: {known}): pass a BenchmarkSpec "
                         "(BenchmarkSpec.from_config(node)), or register it first -- in a clone of numlearn, "
                         "register_benchmarks(numlearn.cli.benchmark_configs()) registers conf/eval/benchmark")
    return _REGISTERED[name]

