"""Scorers: how a generations line becomes an answer and a verdict, chosen once by name.

In the style of lm-evaluation-harness's named filters: ``eval.protocol`` (or ``score --protocol``)
names one scorer, and nothing downstream branches on the name again. A scorer says

* which of an attempt's program runs it reads (``program_key``: each line keeps a program's run as
  written, ``strict``, and as the official executor wraps it, ``official``) and whether it runs the
  programs of CoT attempts too (the official code executes any completion with ``print(``);
* how it extracts the prediction from an attempt, normalises the ground truth, and compares them.

``score_row`` is shared: the first attempt's answer, else (mode ``paper``) the CoT backup's. Three
scorers are registered:

* ``strict``: our extraction and exact comparison of normalised strings (``extract``);
* ``official``: the DEL authors' eval code, decision by decision (``official``);
* ``math-verify``: ``strict``, except that a MATH answer also counts as correct when math-verify
  proves it equivalent to the reference (``pip install numlearn[mathverify]``); other benchmarks
  are scored exactly as ``strict``.

A new scorer is a subclass and one line in ``SCORERS``.
"""

from __future__ import annotations

from . import official
from .extract import is_equivalent_symbolic, strict_extract, strict_is_correct, strict_truth
from .spec import BenchmarkSpec, as_spec


class Scorer:
    name: str = ""
    program_key: str = "strict"  # which run of a generated program this scorer reads
    programs_of_cot_attempts: bool = False  # a CoT completion with print( is executed too
    emulates_executor: bool = False  # reads program runs of an emulated executor (lines from older versions are redone)

    def extract(self, spec: BenchmarkSpec, completion: str, force_choice_letter: bool = False) -> str:
        raise NotImplementedError

    def truth(self, spec: BenchmarkSpec, raw) -> str:
        raise NotImplementedError

    def correct(self, spec: BenchmarkSpec, pred: str, raw_truth) -> bool:
        raise NotImplementedError

    def attempt_pred(self, spec: BenchmarkSpec, att: dict, requested: str, force_choice_letter: bool = False) -> str:
        """The prediction one attempt gives ("" when none)."""
        raise NotImplementedError

    def extra_metrics(self, records: list[dict], kind: str) -> dict:
        """Figures of this scorer's own beside the shared metrics (``compute_metrics``)."""
        return {}

    def program_of(self, att: dict) -> dict | None:
        """The run of ``att``'s program this scorer reads (None: it read none)."""
        if att["kind"] == "pot" or self.programs_of_cot_attempts:
            return (att["program"] or {}).get(self.program_key)
        return None

    def score_row(self, spec: BenchmarkSpec, row: dict, force_choice_letter: bool = False) -> dict:
        """The answer of one generations line: pred, correct, the truth as this scorer compares it,
        and which attempt answered (``mode``)."""
        atts, requested = row["attempts"], row["requested_mode"]
        used = atts[0]
        pred = self.attempt_pred(spec, used, requested, force_choice_letter)
        if pred == "" and requested == "paper" and len(atts) > 1:
            used = atts[1]
            pred = self.attempt_pred(spec, used, requested, force_choice_letter)
        mode = "cot_backup" if used is not atts[0] else used["kind"]
        prog = self.program_of(atts[0])
        return {"protocol": self.name, "pred": pred, "correct": self.correct(spec, pred, row["gt_raw"]),
                "gt": self.truth(spec, row["gt_raw"]), "mode": mode, "completion": used["completion"],
                "program_ok": None if prog is None else prog["ok"],
                "program_stop": None if prog is None else prog.get("stop")}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class StrictScorer(Scorer):
    name = "strict"
    program_key = "strict"

    def extract(self, spec, completion, force_choice_letter=False):
        return strict_extract(spec, completion, force_choice_letter)

    def truth(self, spec, raw):
        return strict_truth(spec, raw)

    def correct(self, spec, pred, raw_truth):
        return strict_is_correct(spec, pred, raw_truth)

    def attempt_pred(self, spec, att, requested, force_choice_letter=False):
        if att["kind"] == "pot":
            prog = (att["program"] or {}).get(self.program_key)
            if prog is not None:
                return self.extract(spec, "The answer is " + prog["output"].strip()) if prog["ok"] else ""
            return self.extract(spec, att["completion"]) if requested == "pot" else ""
        return self.extract(spec, att["completion"], force_choice_letter)


class OfficialScorer(Scorer):
    name = "official"
    program_key = "official"
    programs_of_cot_attempts = True
    emulates_executor = True

    def extract(self, spec, completion, force_choice_letter=False):
        pred = official.answer_clean(spec.answer, completion, official.triggers_for(spec))
        return official.force_choice(pred) if spec.answer == "choice" else pred

    def truth(self, spec, raw):
        return official.truth(spec.loader, raw)

    def correct(self, spec, pred, raw_truth):
        return official.is_correct(spec.answer, pred, self.truth(spec, raw_truth))

    def extra_metrics(self, records, kind):
        # run_open.py's per-digit accuracy, over the problems where the prediction parses (metric_notes)
        return {"digit_acc_official": official.digit_accuracy(records)} if kind in ("number", "open_number") else {}

    def attempt_pred(self, spec, att, requested, force_choice_letter=False):
        # run_open.py / run_choice.py: any completion with "print(" is executed, whatever was asked;
        # a failed or silent program answers "" (then the CoT backup, on open sets under paper).
        prog = (att["program"] or {}).get(self.program_key)
        text = att["completion"] if prog is None else "The answer is " + (
            prog["output"].strip("\n") if prog["ok"] else "")
        return self.extract(spec, text)


class MathVerifyScorer(StrictScorer):
    name = "math-verify"

    def correct(self, spec, pred, raw_truth):
        if super().correct(spec, pred, raw_truth):
            return True
        if spec.answer != "math" or pred == "":
            return False
        return bool(is_equivalent_symbolic(pred, self.truth(spec, raw_truth)))


SCORERS: dict[str, Scorer] = {s.name: s for s in (StrictScorer(), OfficialScorer(), MathVerifyScorer())}
PROTOCOLS = tuple(SCORERS)


def get_scorer(name: str | Scorer) -> Scorer:
    """The scorer registered as ``name`` (a ``Scorer`` passes through); a clear error otherwise."""
    if isinstance(name, Scorer):
        return name
    if name not in SCORERS:
        raise ValueError(f"eval.protocol={name!r}; choose one of {PROTOCOLS}")
    if name == "math-verify" and is_equivalent_symbolic("1", "1") is None:
        raise ValueError("eval.protocol=math-verify needs the math-verify package: pip install 'numlearn[mathverify]'")
    return SCORERS[name]


def check_protocol(protocol: str) -> str:
    """``protocol`` when a scorer has that name; the error names the choices otherwise."""
    return get_scorer(protocol).name


# -- the public one-call forms: the scorer named ``protocol``, applied once --------------------------
def extract_answer(benchmark: str | BenchmarkSpec, completion: str, protocol: str = "strict",
                   force_choice_letter: bool = False) -> str:
    """Normalised prediction for ``benchmark`` from a completion ("" when there is none), as the
    scorer named ``protocol`` reads it (``numlearn.evaluation.scorers``). The official scorer
    returns exactly the string the official code compares: for multiple choice after its forcing
    of "A" when no letter A-J is found (``force_choice_letter`` is the strict scorer's opt-in to
    the same rule)."""
    return get_scorer(protocol).extract(as_spec(benchmark), completion, force_choice_letter)


def normalize_truth(benchmark: str | BenchmarkSpec, answer, protocol: str = "strict") -> str:
    """The ground truth as the scorer named ``protocol`` compares it, from the loader's raw answer."""
    return get_scorer(protocol).truth(as_spec(benchmark), answer)


def is_correct(benchmark: str | BenchmarkSpec, pred: str, ground_truth, protocol: str = "strict") -> bool:
    """The comparator of the scorer named ``protocol`` on the raw ground truth. strict: exact
    match of normalised strings (numbers compared as canonical decimal strings, so "5.0" == "5"
    and "1,000" == "1000"); official: the official comparison (case-insensitive string equality
    with the official loader's truth, the "(a)" substring rule; exact letters for multiple choice)."""
    return get_scorer(protocol).correct(as_spec(benchmark), pred, ground_truth)
