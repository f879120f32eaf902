"""``protocol="official"``: the DEL authors' evaluation code (PolyU-VCLab/DEL @ 68c3d4d, ``eval/``),
decision by decision. Every verdict below was read off that code (``utils.answer_clean``,
``delete_extra_zero``, ``extract_math_answer``, ``_strip_string``, ``compare_answer_with_groundtruth``,
``run_open.py``, ``run_choice.py``, ``code_utils.CodeExecutor``), not guessed; where the official
code and our docs (the strict protocol) disagree, the official column is what the authors ran.
"""

from __future__ import annotations

import pytest

from numlearn.evaluation import extract_answer, is_correct
from numlearn.evaluation.benchmarks import Problem
from numlearn.evaluation.official import (
    delete_extra_zero,
    executor_preload,
    executor_run_kwargs,
    strip_string,
    truth,
    wrap_program,
)
from numlearn.evaluation.runner import (
    chain_seed,
    evaluate_problems,
    line_digest,
    read_jsonl,
    rescore,
    run_key,
)
from numlearn.evaluation.sandbox import Start, run_program
from test_evaluation import SAMPLING, ScriptedBackend

# (benchmark, completion) -> (official string, strict string)
CASES = {
    # a trigger that occurs twice: official keeps only the first "\n\n" chunk
    ("gsm8k", "The answer is 5.\n\nThe answer is 7."): ("5", "7"),
    # after a trigger the FIRST number; without one the LAST
    ("svamp", "The answer is 5 or 6"): ("5", "5"),
    ("svamp", "3 then 4"): ("4", "4"),
    # ".5" as the official regex reads it (\d+ first): "5"; ours reads 0.5
    ("svamp", "The answer is .5"): ("5", "0.5"),
    # trailing zeros via float(): "5.0" -> "5", "2.50" -> "2.5"
    ("svamp", "The answer is 2.50"): ("2.5", "2.5"),
    # a fraction is evaluated: "3/4" -> "0.75"
    ("svamp", "The answer is 3/4"): ("0.75", "0.75"),
    # huge integers go through str(float): "1e+20" -> rstrip("0") -> "1e+2" -> "100.0"
    ("svamp", "The answer is 100000000000000000000"): ("100.0", "100000000000000000000"),
    # "####" is a trigger on GSM8K only
    ("gsm8k", "so 3 + 4 = 7\n#### 7"): ("7", "7"),
    ("svamp", "12 apples #### 7 left 9"): ("9", "9"),
    # the colon of "The answer is:" is part of the trigger
    ("svamp", "The answer is: 42."): ("42", "42"),
    # MATH: \boxed is looked for only in the text after the trigger split; the "=" split and the
    # "5 apples" rule only when a trigger was found, else the last number
    ("math", "so x = \\boxed{\\frac12}. The answer is 3"): ("3", "\\frac{1}{2}"),
    ("math", "The answer is \\boxed{\\frac12}"): ("\\frac{1}{2}", "\\frac{1}{2}"),
    ("math", "The answer is x = 5 apples"): ("5", "5apples"),
    ("math", "we get y = 7 and then 9"): ("9", "7andthen9"),
    # MATH: no "0.5" -> "\frac{1}{2}" conversion in the official normalisation
    ("math", "The answer is 0.5"): ("0.5", "\\frac{1}{2}"),
    # multiple choice: the text is UPPER-CASED before looking for standalone letters A-J
    ("aqua", "The answer is (c)"): ("C", ""),
    ("aqua", "The answer is a car"): ("A", ""),
    ("aqua", "I think it is J"): ("J", ""),
    # no letter: the official run_choice forces "A"
    ("sat", "no idea"): ("A", ""),
    # multiple choice triggers are ("####", "The answer is"): "the answer is" is not one
    ("mmlu_mathematics", "B is wrong; the answer is D, not C"): ("C", "D"),
}


@pytest.mark.parametrize("bench,completion", sorted(CASES))
def test_extract_answer_official_vs_strict(bench, completion):
    want_official, want_strict = CASES[(bench, completion)]
    assert extract_answer(bench, completion, protocol="official") == want_official
    assert extract_answer(bench, completion, protocol="strict") == want_strict


@pytest.mark.parametrize("bench,pred,gt,official,strict", [
    ("svamp", "5", "5.0", True, True),              # loader drops ".0"; we compare numbers
    ("simuleq", "5", "5.0", False, True),           # simuleq truth is str(answer): "5.0" != "5"
    ("gsm8k", "1000", "1,000", True, True),
    ("svamp", "0.5", "1/2", True, True),            # the svamp loader evaluates its truth too
    ("simuleq", "0.5", "1/2", False, True),         # simuleq's does not: official compares strings
    ("math", "\\text{Evelyn}", "\\text{Evelyn}", True, True),
    ("math", "ABC", "abc", True, False),            # official comparison ignores case
    ("math", "(a) and (c)", "(A)", True, False),    # the "(a)" substring rule
    ("aqua", "a", "A", False, True),                # official compares letters exactly
    ("aqua", "A", "A", True, True),
])
def test_is_correct_official_vs_strict(bench, pred, gt, official, strict):
    assert is_correct(bench, pred, gt, protocol="official") is official
    assert is_correct(bench, pred, gt, protocol="strict") is strict


def test_loader_truths():
    assert truth("gsm8k", "1,000") == "1000"
    assert truth("svamp", "51.0") == "51" and truth("svamp", "2.50") == "2.5"
    assert truth("question_answer", "5.0") == "5.0"  # simuleq / sat: str(answer), untouched
    assert truth("math", "\\dfrac{1}{2}") == "\\frac{1}{2}"
    assert truth("math", "10\\%") == "10"  # only "\%" is removed: both official replacements are "\%"
    assert strip_string("50%") == "50%"
    assert delete_extra_zero("007") == "7" and delete_extra_zero("3/0") == "3/0"
    assert delete_extra_zero("12/") == "12/" and delete_extra_zero("-3/4") == "-0.75"


def test_programs_run_as_the_official_executor_runs_them():
    main_guarded = "def f():\n    return 42\nif __name__ == '__main__':\n    print(f())"
    assert run_program(main_guarded).stdout.strip() == "42"  # strict: runs as a script
    r = _unframed(run_program(wrap_program(main_guarded)))
    assert r.ok and r.stdout == ""  # official: the __main__ block does not run
    star = "from math import *\nprint(sqrt(16))"
    assert run_program(star).stdout.strip() == "4.0"
    assert not run_program(wrap_program(star)).ok  # "import *" inside run_it is a SyntaxError
    assert _unframed(run_program(wrap_program("x = 3\nprint(x * 2)"))).stdout.strip() == "6"


def _unframed(r):
    """A wrapped program's ProgramResult with its answer out of the frame (``official.unframe``)."""
    import dataclasses

    from numlearn.evaluation.official import unframe

    u = unframe({"output": r.stdout, "ok": r.ok, "error": r.error})
    return dataclasses.replace(r, stdout=u["output"], ok=u["ok"], error=u["error"] or r.error)


def _official(code: str, **kw):
    return _unframed(run_program(wrap_program(code), **(executor_run_kwargs(code) | kw)))


# program -> the official answer (None: no result, "" after "The answer is"), each read off
# code_utils.CodeExecutor.execute_code (exec under redirect_stdout(StringIO()), ``except Exception:
# pass``, in a multiprocessing child whose parent imported numpy/sympy) -- and the strict answer.
EXECUTOR_CASES = {
    # prints, then exit(): SystemExit is not an Exception, it escapes, the child ends without a
    # result -> "" (then the CoT backup); strict keeps the printed answer
    "print(42)\nexit()": (None, "42"),
    "import sys\nprint(42)\nsys.exit(0)": (None, "42"),
    "print(42)\nraise KeyboardInterrupt": (None, None),
    # an Exception after the print: the captured stdout is dropped (return_val is never set)
    "print(5)\nraise ValueError('no')": (None, None),
    # names of code_utils' module globals, used without an import
    "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()\nprint(7)": ("7", None),
    "buf = StringIO()\nbuf.write('8')\nprint(buf.getvalue())": ("8", None),
    "print(__name__)": ("code_utils", "__main__"),
    # more than the strict 64 KB of output: StringIO has no limit; the answer is the whole text
    "print('1' * 100000)\nprint(9)": ("1" * 100000 + "\n9", None),
    # output around redirect_stdout goes to the parent's console, not into the answer
    "import sys\nprint(3, file=sys.__stdout__)\nprint(4)": ("4", "3\n4"),
    # only leading/trailing newlines are stripped (then answer_clean strips the rest)
    "print()\nprint(' 6 ')\nprint()": (" 6 ", "\n 6 "),
}


@pytest.mark.parametrize("code", sorted(EXECUTOR_CASES))
def test_official_executor_verdicts(code):
    official, strict = EXECUTOR_CASES[code]
    r = _official(code)
    assert (r.stdout if r.ok else None) == official, r.error
    s = run_program(code)
    assert (s.stdout.rstrip("\n") if s.ok else None) == strict, s.error


def test_official_executor_memory_beyond_the_strict_cap():
    """1.5 GB written (numpy, preloaded as in the official parent): answered under the official bound (the
    executor has none; ours is a 4 GB safety cap), a counted memory stop under strict's 1 GB: the memory
    cgroup's kill, which the supervisor observes (issue 41: never the program's exit status)."""
    code = "import numpy as np\na = np.ones(1500 * 2**20 // 8)\nprint(a.nbytes // 2**20)"
    r = _official(code)
    assert r.ok and r.stdout == "1500"
    from numlearn.evaluation.sandbox import memory_stops_observed

    if not memory_stops_observed():
        pytest.skip("no memory cgroup that counts its OOM kills: memory stops are not observed here")
    s = run_program("b = b'x' * (1500 * 2**20)\nprint(len(b))", memory_mb=1024)  # (strict cannot import numpy)
    assert not s.ok and s.memory_limited
    capped = _official(code, memory_mb=1024)  # at our cap: counted, not a program error
    assert not capped.ok and capped.memory_limited and "memory cgroup" in capped.error
    own = _official("raise MemoryError('the program's own')")  # what the executor shows: no result, not counted
    assert not own.ok and not own.memory_limited and own.returncode == 1


def test_official_clock_starts_after_the_executors_imports():
    """The official 5 s join starts after the fork, the parent's imports (torch, numpy, sympy) done: a
    program that computes for 1.0 s of a 1.5 s budget passes, however long our interpreter takes to
    start and import torch (about 0.8 s here); with the clock started early it times out."""
    code = "import torch, time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.0:\n    pass\nprint(torch.tensor(2) + 1)"
    assert executor_preload(code)[-1] == "torch"
    assert "sympy" in executor_preload("import sympy") and "numpy" in executor_preload("import sympy")
    assert not {"sympy", "numpy", "torch"} & set(executor_preload("print(1)"))
    r = _official(code, timeout_s=1.5)
    assert r.ok and r.stdout == "tensor(3)", r.error
    assert r.startup_seconds > 0.5 and r.seconds >= 1.0 + r.startup_seconds
    early = run_program(wrap_program(code), timeout_s=1.5, memory_mb=4096,
                        start=Start(executor_preload(code), clock_after_preload=True, startup_timeout_s=1e-3))
    assert early.timed_out  # the same program, its clock started before the imports


def test_exit_after_print_takes_the_cot_backup_under_official(tmp_path):
    out = tmp_path / "g.jsonl"

    def backend(prompt):
        return "print(8)\nexit()" if "program" in prompt else "The answer is 8."
    evaluate_problems([Problem("0", "What is 4 + 4?", "8", "8")], ScriptedBackend(backend), "svamp", "paper",
                      SAMPLING, out, protocol="official")
    (r,), _ = read_jsonl(out)
    assert (r["pred"], r["mode"]) == ("8", "cot_backup")
    (s,) = rescore([r], "svamp", "strict")
    assert (s["pred"], s["mode"]) == ("8", "pot")


def _problems():
    return [Problem("0", "What is 2 + 3?", "5", "5"), Problem("1", "What is 4 + 4?", "8", "8"),
            Problem("2", "What is 1 + 1?", "2", "2")]


def _backend(prompt):
    q = prompt.split("### Instruction:\n")[1]
    if "program" in q:
        if "2 + 3" in q:
            return "The sum is 5."  # no print(: official answers from the text, strict re-asks
        if "4 + 4" in q:
            return "def main():\n    print(4 + 4)\nif __name__ == '__main__':\n    main()"
        return "x = 1 + 1\nprint(x)"
    return {"2 + 3": "The answer is 6.", "4 + 4": "The answer is 8.", "1 + 1": "The answer is 3."}[q.split("What is ")[1][:5]]


def test_pot_with_cot_backup_official_vs_strict_from_one_generation_pass(tmp_path):
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(_backend)
    evaluate_problems(_problems(), be, "svamp", "paper", SAMPLING, out, protocol="official")
    recs, _ = read_jsonl(out)
    # official: "The sum is 5." answers 5 from the text; the __main__-guarded program prints nothing
    # under the official executor -> CoT backup (8); the plain program prints 2
    assert [(r["pred"], r["mode"]) for r in recs] == [("5", "pot"), ("8", "cot_backup"), ("2", "pot")]
    assert [r["correct"] for r in recs] == [True, True, True]
    # the backup was generated for problem 0 too, because strict needs it there
    assert [len(r["attempts"]) for r in recs] == [2, 2, 1]
    strict = rescore(recs, "svamp", "strict")
    # strict: no program -> re-asked (6, wrong); the guarded program runs as a script (8)
    assert [(r["pred"], r["mode"]) for r in strict] == [("6", "cot_backup"), ("8", "pot"), ("2", "pot")]
    assert [r["correct"] for r in strict] == [False, True, True]
    calls = be.calls
    assert rescore(strict, "svamp", "official") == recs
    assert be.calls == calls  # rescoring generates nothing


def test_multiple_choice_executes_programs_under_official(tmp_path):
    out = tmp_path / "g.jsonl"
    be = ScriptedBackend(lambda p: "x = 66\nprint(chr(x))")
    p = [Problem("0", "Pick\nAnswer Choices: (A) 1 (B) 2 (C) 3 (D) 4", "B", "B")]
    evaluate_problems(p, be, "sat", "paper", SAMPLING, out, protocol="official")
    (r,), _ = read_jsonl(out)
    assert (r["pred"], r["correct"]) == ("B", True)  # run_choice.py executes any "print("
    (s,) = rescore([r], "sat", "strict")
    assert (s["pred"], s["correct"]) == ("", False)  # strict reads the text: no standalone letter


def test_per_digit_accuracy_official_denominator_vs_ours():
    """run_open.py counts a problem's digits only when the answer and the truth both pass float();
    ours counts every problem whose truth parses (an unparsable answer is wrong in every slot)."""
    from numlearn.evaluation.metrics import compute_metrics
    from numlearn.evaluation.official import digit_accuracy

    recs = [{"id": "0", "gt": "125", "pred": "135", "correct": False, "mode": "cot"},  # tens wrong
            {"id": "1", "gt": "7", "pred": "seven", "correct": False, "mode": "cot"},  # not a number
            {"id": "2", "gt": "2.5", "pred": "2.5", "correct": True, "mode": "cot"},
            {"id": "3", "gt": "40", "pred": "1e5", "correct": False, "mode": "cot"},  # float() yes, pattern no
            {"id": "4", "gt": "9", "pred": "", "correct": False, "mode": "cot"}]
    off = digit_accuracy(recs)
    assert off["n_problems"] == 3  # 0, 2, 3
    assert off["digit_count_int"] == {"0": 3, "1": 2, "2": 1}
    assert off["digit_acc_int"] == {"0": 2 / 3, "1": 0.0, "2": 1.0}
    assert off["digit_acc_frac"] == {"1": 1.0}
    ours = compute_metrics([r | {"protocol": "strict"} for r in recs], "number")
    assert ours["n_digit_problems"] == 5 and ours["digit_count_int"]["0"] == 5
    assert ours["digit_acc_int"]["0"] == 2 / 5 and "digit_acc_official" not in ours
    both = compute_metrics([r | {"protocol": "official"} for r in recs], "number")
    assert both["digit_acc_official"] == off and both["digit_acc_int"] == ours["digit_acc_int"]


def test_program_stops_are_counted():
    from numlearn.evaluation.metrics import compute_metrics

    recs = [{"id": str(i), "gt": "1", "pred": "", "correct": False, "mode": "pot", "program_ok": False,
             "program_stop": stop} for i, stop in enumerate(["memory", "output", "timeout", None, "memory"])]
    m = compute_metrics(recs, "number")
    assert (m["n_program_memory_capped"], m["n_program_output_capped"], m["n_program_timed_out"]) == (2, 1, 1)
    assert m["n_program_failed"] == 5


def test_official_resume_regenerates_program_runs_of_an_earlier_executor(tmp_path, capsys, caplog):
    import json

    out = tmp_path / "g.jsonl"
    probs = [Problem("0", "What is 4 + 4?", "8", "8"), Problem("1", "What is 1 + 1?", "2", "2")]
    progs = {"4 + 4": "print(8)\nexit()", "1 + 1": "The answer is 2."}
    be = ScriptedBackend(lambda p: next(v for k, v in progs.items() if k in p) if "program" in p
                         else "The answer is 8.")
    evaluate_problems(probs, be, "svamp", "pot", SAMPLING, out, protocol="official")
    recs, _ = read_jsonl(out)
    for r in recs:  # as an earlier numlearn wrote them: no executor mark, exit() kept the print
        for a in r["attempts"]:
            if a["program"]:
                a["program"]["official"] = {"output": "8\n", "ok": True, "error": None}
    head = chain_seed(run_key("", 5.0, False))  # as that numlearn wrote them: a whole chain
    for r in recs:
        r["chain"] = head = line_digest(head, r)
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    calls = len(be.prompts)
    info = evaluate_problems(probs, be, "svamp", "pot", SAMPLING, out, protocol="strict")
    assert info["n_stale_lines"] == 0 and len(be.prompts) == calls  # strict never reads the official runs
    info = evaluate_problems(probs, be, "svamp", "pot", SAMPLING, out, protocol="official")
    assert info["n_stale_lines"] == 1 and info["n_resumed"] == 1 and len(be.prompts) == calls + 1
    assert "earlier emulation of the official executor" in caplog.text
    assert [r["pred"] for r in sorted(read_jsonl(out)[0], key=lambda r: r["id"])] == ["", "2"]


@pytest.mark.parametrize("attack", [
    "import os\nos.write(3, b'42')\nos._exit(0)",
    "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'42')\n    except OSError:\n        pass\nos._exit(0)",
    "import os, sys\nprint(42)\nsys.stdout.flush()\nos._exit(0)",
])
def test_a_program_that_ends_the_executor_itself_has_no_official_answer(attack):
    """Issue 41: under official, a program wrote its answer to the wrapper's answer descriptor and left
    with os._exit(0) -- answered, where the executor's forked child answers only through its result queue
    (no result: the CoT backup runs). The answer now travels in a frame written after exec returned."""
    from numlearn.evaluation.runner import make_attempt

    att = make_attempt("pot", "p", attack + "\nprint(1)", 5.0)
    off = att["program"]["official"]
    assert off["output"] == "" and not off["ok"] and "no answer" in off["error"], off
    normal = make_attempt("pot", "p", "print(6 * 7)", 5.0)["program"]["official"]
    assert normal["ok"] and normal["output"] == "42"


def test_a_10_mb_answer_is_answered_under_official_as_by_the_executor():
    """Issue 41, item 13: the executor keeps stdout in memory with no bound, so a program printing 10 MB
    is answered there; the old 8 MB cap sent it to the CoT backup. Strict keeps its 64 KB cap."""
    code = "print('7' * (10 * 2**20))"
    r = _official(code, timeout_s=20)
    assert r.ok and len(r.stdout) == 10 * 2**20 and r.stdout[:3] == "777", (r.ok, r.error, len(r.stdout))
    assert not run_program(code, timeout_s=20).ok  # strict: the 64 KB output cap
