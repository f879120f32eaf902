"""Scorers are objects chosen once by name (numlearn.evaluation.scorers): the registry, the shared
backup rule, math-verify as a third scorer without new branches, and no protocol-name branches left
in the modules that score."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from numlearn.evaluation import scorers
from numlearn.evaluation.runner import rescore
from numlearn.evaluation.scorers import PROTOCOLS, SCORERS, Scorer, get_scorer
from numlearn.evaluation.spec import as_spec

EVAL = Path(__file__).resolve().parents[1] / "src" / "numlearn" / "evaluation"


def _row(bench: str, gt, *attempts, requested="cot"):
    return {"id": "p", "gt_raw": gt, "requested_mode": requested,
            "attempts": [{"kind": k, "prompt": "", "completion": c, "program": prog} for k, c, prog in attempts]}


def test_registry_and_errors():
    assert PROTOCOLS == ("strict", "official", "math-verify")
    assert get_scorer("official") is SCORERS["official"] and get_scorer(SCORERS["strict"]) is SCORERS["strict"]
    with pytest.raises(ValueError, match=r"eval.protocol='exact'; choose one of \('strict', 'official', 'math-verify'\)"):
        get_scorer("exact")


def test_math_verify_counts_proven_equivalents_on_math_only():
    pytest.importorskip("math_verify")
    math = _row("math", "\\frac{1}{2}", ("cot", "so the answer is \\boxed{2/4}", None))
    strict, mv = (get_scorer(n).score_row(as_spec("math"), math) for n in ("strict", "math-verify"))
    assert strict["pred"] == mv["pred"] and not strict["correct"]  # exact match of normalised strings fails
    assert mv["correct"] and mv["protocol"] == "math-verify"
    wrong = _row("math", "\\frac{1}{2}", ("cot", "\\boxed{3/4}", None))
    assert not get_scorer("math-verify").score_row(as_spec("math"), wrong)["correct"]
    # elsewhere it is the strict scorer, line for line
    gsm = [_row("gsm8k", "18", ("cot", "The answer is 18.", None)), _row("gsm8k", "18", ("cot", "so 0.18e2", None))]
    a, b = rescore(gsm, "gsm8k", "strict"), rescore(gsm, "gsm8k", "math-verify")
    assert [(r["pred"], r["correct"]) for r in a] == [(r["pred"], r["correct"]) for r in b]


def test_math_verify_without_the_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(scorers, "is_equivalent_symbolic", lambda pred, truth: None)
    with pytest.raises(ValueError, match=r"pip install 'numlearn\[mathverify\]'"):
        get_scorer("math-verify")


def test_the_backup_rule_is_shared_and_each_scorer_reads_its_own_program_run():
    prog = {"strict": {"output": "7\n", "ok": True}, "official": {"output": "", "ok": False}}
    row = _row("gsm8k", "7", ("pot", "print(7)", prog), ("cot", "The answer is 8", None), requested="paper")
    s, o = (get_scorer(n).score_row(as_spec("gsm8k"), row) for n in ("strict", "official"))
    assert (s["pred"], s["mode"], s["correct"], s["program_ok"]) == ("7", "pot", True, True)
    # the official run failed: "" -> the CoT backup answers, and that answer is wrong
    assert (o["pred"], o["mode"], o["correct"], o["program_ok"]) == ("8", "cot_backup", False, False)


def test_a_new_scorer_is_a_subclass():
    class Lenient(type(SCORERS["strict"])):
        name = "lenient"

        def correct(self, spec, pred, raw_truth):
            return pred != ""

    r = Lenient().score_row(as_spec("gsm8k"), _row("gsm8k", "1", ("cot", "The answer is 2", None)))
    assert r["correct"] and r["protocol"] == "lenient" and isinstance(Lenient(), Scorer)


def test_no_module_that_scores_branches_on_a_protocol_name():
    names = set(PROTOCOLS)
    for f in sorted(EVAL.rglob("*.py")):
        if f.name in ("scorers.py", "official.py"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                assert not names & set(consts), f"{f.name}:{node.lineno} compares with a scorer's name: ask the scorer"
