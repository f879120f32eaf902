"""``protocol="official"``: the DEL authors' evaluation code (PolyU-VCLab/DEL ``eval/``: ``utils.py``,
``run_open.py``, ``run_choice.py``, ``data_loader.py``), decision by decision, written here from a
reading of that code. ``docs/evaluation.md`` lists every difference to ``protocol="strict"``.

What it reproduces:

* answer cleaning (``utils.answer_clean``): a trigger that occurs twice keeps only the first
  "\\n\\n" chunk; the text after the LAST trigger (``re.split`` on the triggers) is used and sets
  ``answer_flag``; numbers are the regex ``-?\\d+/?\\.?\\d*`` over the comma-free text (so ".5" reads
  as "5"), each passed through ``delete_extra_zero``; the first candidate when a trigger was found,
  else the last; multiple choice takes standalone letters A-J of the UPPER-CASED text;
* MATH (``extract_math_answer``): ``\\boxed`` content (brace-matched) whenever "boxed" occurs;
  else, after a trigger, the text after the last "=" (and "5 apples" -> "5"); else the last number;
  then the MATH string normalisation ``_strip_string`` (no "0.5" -> "\\frac{1}{2}");
* comparison (``compare_answer_with_groundtruth``): ``\\text{`` stripped from both, the ``(a)``
  substring rule, else case-insensitive string equality with the loader's truth; multiple choice
  (``run_choice``): anything that is not a letter A-J becomes "A", then exact equality;
* programs: run as ``CodeExecutor`` runs them (``wrap_program``) -- the code indented into
  ``def run_it():`` and exec'd in the executor's module globals (``__name__`` "code_utils";
  ``threading``, ``multiprocessing``, ... usable unimported) under ``redirect_stdout``; the answer
  is the captured stdout (newlines stripped, no size limit), or "" when it raised, called
  ``exit()`` or timed out (5 s, counted from after the executor's imports).
"""

from __future__ import annotations

import re

CHOICE_TRIGGERS = ("####", "The answer is")  # run_choice.py passes these, not the open-set ones
CHOICE_LETTERS = tuple("ABCDEFGHIJ")
_NUMBER = re.compile(r"-?\d+/?\.?\d*")
_LAST_NUMBER = re.compile(r"-?\d*\.?\d+")
_INT_LITERAL = re.compile(r"0+|[1-9][0-9]*")  # Python literals are ASCII; "007" is a syntax error
_FLOAT_LITERAL = re.compile(r"[0-9]+\.[0-9]*|\.[0-9]+")


def triggers_for(spec) -> tuple[str, ...]:
    """run_open.py: "The answer is:", "The answer is", "the answer is" (+ "####" on GSM8K, the
    spec's extra trigger); run_choice.py: its own pair."""
    return CHOICE_TRIGGERS if spec.answer == "choice" else spec.all_triggers


# ---------------------------------------------------------------- numbers
def _python_literal(s: str) -> int | float | None:
    """The value Python's parser gives a numeric literal (leading zeros are a syntax error)."""
    if _INT_LITERAL.fullmatch(s):
        return int(s)
    if _FLOAT_LITERAL.fullmatch(s):
        return float(s)
    return None


def _eval_quotient(s: str) -> float | None:
    """``eval(s)`` for what the number regex can yield that ``float`` rejects ("a/b", "-a/b"):
    None where eval raises (syntax error, division by zero)."""
    neg = s.startswith("-")
    a, sep, b = s.lstrip("-").partition("/")
    if not sep:
        return None
    x, y = _python_literal(a), _python_literal(b)
    if x is None or y is None or y == 0:
        return None
    return (-x if neg else x) / y


def delete_extra_zero(s: str) -> str:
    """``utils.delete_extra_zero``: float() (or eval of a quotient), then trailing zeros dropped via
    ``str`` -- including its quirks ("1e+20" loses its exponent's zero and becomes "100.0")."""
    try:
        x = float(s)
    except ValueError:
        x = _eval_quotient(s)
        if x is None:
            return s
    t = str(x).rstrip("0")
    return str(int(t.rstrip("."))) if t.endswith(".") else str(float(t))


# ---------------------------------------------------------------- MATH
def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\frac"
        if not sub or sub[0] == "{":
            out += sub
            continue
        if len(sub) < 2:
            return s
        a, b, rest = sub[0], sub[1], sub[2:]
        out += "{" + a + "}" + (b + rest if b == "{" else "{" + b + "}" + rest)
    return out


def _fix_a_slash_b(s: str) -> str:
    m = re.fullmatch(r"(-?\d+)/(-?\d+)", s)
    if not m or f"{int(m.group(1))}/{int(m.group(2))}" != s:
        return s
    return "\\frac{" + str(int(m.group(1))) + "}{" + str(int(m.group(2))) + "}"


def _fix_sqrt(s: str) -> str:
    if "\\sqrt" not in s:
        return s
    head, *rest = s.split("\\sqrt")
    out = head
    for piece in rest:
        out += "\\sqrt" + (("{" + piece[0] + "}" + piece[1:]) if piece and piece[0] != "{" else piece)
    return out


def strip_string(s: str) -> str:
    """``utils._strip_string``: the MATH answer normalisation of the official evaluator."""
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"),
                     ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", "")):
        s = s.replace(old, new)
    s = s.strip("$").replace("\\$", "")
    if "\\text{ " in s:  # units on the right
        s = s.split("\\text{ ")[0]
    s = s.replace("\\%", "")  # the official code's two replacements are the same string
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    eq = s.split("=")
    if len(eq) == 2 and len(eq[0]) <= 2:
        s = eq[1]
    s = _fix_sqrt(s).replace(" ", "")
    return _fix_a_slash_b(_fix_fracs(s))


def find_box(text: str) -> str:
    """``utils.find_box``: after the last "boxed", the brace-matched group, or up to a "$"."""
    tail = text.split("boxed")[-1]
    if not tail:
        return ""
    if tail[0] != "{":
        return tail.split("$")[0].strip()
    depth, out = 1, []
    for c in tail[1:]:
        depth += (c == "{") - (c == "}")
        if depth == 0:
            break
        out.append(c)
    return "".join(out)


def extract_math_answer(text: str, answer_flag: bool) -> str:
    if "boxed" in text:
        pred = find_box(text)
    elif answer_flag:
        pred = text.split("=")[-1].strip()
        if re.match(r"[\d\.]+\s\D+$", pred):
            pred = pred.split(" ")[0]
    else:
        nums = _LAST_NUMBER.findall(text)
        pred = nums[-1] if nums else ""
    return strip_string(pred)


# ---------------------------------------------------------------- answer cleaning and comparison
def answer_clean(answer: str, text: str, triggers: tuple[str, ...]) -> str:
    """``utils.answer_clean`` for one of our answer kinds (number, math, choice). For multiple
    choice this is the cleaned string before ``run_choice``'s forcing of "A"."""
    pred = text.strip("\n")
    if any(pred.count(t) > 1 for t in triggers):
        pred = pred.split("\n\n")[0]
    parts = re.split("|".join(triggers), pred)
    answer_flag = len(parts) > 1
    if answer_flag:
        pred = parts[-1]
    pred = pred.strip("\n").rstrip(".").rstrip("/").strip(" ")
    if answer == "choice":
        cands = re.findall(r"\b(A|B|C|D|E|F|G|H|I|J)\b", pred.upper()) or [pred.strip().strip(".")]
    elif answer == "number":
        cands = [delete_extra_zero(m.replace(",", "")) for m in _NUMBER.findall(pred.replace(",", ""))]
    elif answer == "math":
        cands = [extract_math_answer(pred, answer_flag)]
    else:
        raise ValueError(f"official protocol: unknown answer kind {answer!r}")
    if not cands:
        return ""
    pred = cands[0] if answer_flag else cands[-1]
    return pred.rstrip(".").rstrip("/")


def force_choice(pred: str) -> str:
    """``run_choice.py``: an answer that is not a letter A-J is replaced by "A"."""
    return pred if pred in CHOICE_LETTERS else "A"


def compare(answer: str, truth: str) -> bool:
    """``utils.compare_answer_with_groundtruth`` (open sets; no numeric truth is passed there)."""
    if "\\text{" in answer:
        answer = answer.replace("\\text{", "").rstrip("}")
    if "\\text{" in truth:
        truth = truth.replace("\\text{", "").rstrip("}")
    if truth.lower() in ("(a)", "(b)", "(c)", "(d)", "(e)", "(f)"):
        return truth.lower() in answer.lower()
    return answer.lower() == truth.lower()


def is_correct(answer_kind: str, pred: str, truth: str) -> bool:
    if answer_kind == "choice":
        return pred == truth
    return compare(pred, truth)


def truth(loader: str, raw) -> str:
    """The official loader's ground-truth string (``data_loader.data_reader``) from our loader's
    raw answer. MATH.json of the official loader is not public; ``find_math_answer`` (last boxed,
    ``_strip_string``) rebuilds it from the solution, as its own data loader defines."""
    s = str(raw)
    if loader == "gsm8k":
        return delete_extra_zero(s.replace(",", ""))
    if loader == "svamp":
        return delete_extra_zero(s[:-2] if s.endswith(".0") else s)
    if loader == "math":
        return strip_string(s)
    if loader == "synthetic":
        return delete_extra_zero(s)
    return s  # simuleq, sat: str(answer); aqua, mmlu: the letter


# -- programs: eval/code_utils.py's CodeExecutor, run by utils.execute_with_timeout(code, 5, use_process=True)
#
# The executor forks a child (multiprocessing.Process) from run_open.py / run_choice.py, whose parent
# has imported numpy, torch, sympy (utils -> latex2sympy2) and the stdlib below; the child runs
# exec(format_code(code), code_utils.globals(), locals()) under redirect_stdout(StringIO()), and
# ``except Exception: pass``. What follows from that, and how wrap_program + EXECUTOR reproduce it:
#   * the answer is the captured stdout, "\n"-stripped, and only when the exec returned: a program that
#     raised discards what it printed;
#   * SystemExit / exit() / KeyboardInterrupt are BaseExceptions: they escape ``except Exception``, the
#     child ends without a result, and the answer is "" (so the CoT backup runs);
#   * names the executor's module defines are usable unimported: multiprocessing, threading, StringIO,
#     redirect_stdout, format_code, CodeExecutor; ``__name__`` is "code_utils";
#   * stdout has no size limit (StringIO); memory has none but the machine's;
#   * the 5 s join starts after the fork, with the parent's imports already loaded.
# Output written around redirect_stdout (sys.__stdout__, os.write(1, ...)) went to the parent's
# console, not into the answer; the wrapper sends fd 1 to a file it discards.
_WRAPPER = r"""import multiprocessing
import threading
from io import StringIO
from contextlib import redirect_stdout


def format_code(code_str: str):
    code = 'def run_it():\n'
    for line in code_str.split('\n'):
        code += '  ' + line + '\n'
    code += 'run_it()'
    return code


class CodeExecutor:  # the executor's class: a name its globals hold (its body is not needed here)
    pass


def _numlearn_official(source):
    import builtins, os, sys, traceback
    g = {"__name__": "code_utils", "__doc__": None, "__package__": "", "__file__": "code_utils.py",
         "__builtins__": builtins, "multiprocessing": multiprocessing, "threading": threading,
         "StringIO": StringIO, "redirect_stdout": redirect_stdout, "format_code": format_code,
         "CodeExecutor": CodeExecutor}
    answer_fd = os.dup(1)
    console = os.open("console.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(console, 1)
    os.close(console)
    try:
        f = StringIO()
        with redirect_stdout(f):
            exec(format_code(source), g, {})
        s = f.getvalue().strip('\n')
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    except BaseException as e:
        sys.stderr.write(f"{type(e).__name__} escaped the executor's 'except Exception': no result\n")
        sys.stderr.flush()
        os._exit(__BASE_EXIT__)
    payload = s.encode("utf-8", "surrogatepass")
    data = b"__FRAME_HEAD__" + str(len(payload)).encode() + b"\n" + payload + b"__FRAME_TAIL__"
    while data:
        data = data[os.write(answer_fd, data):]
    os._exit(0)


_numlearn_official(__SOURCE__)
"""

# Bumped when the emulation's verdicts change: generations whose official program runs carry another
# version are regenerated by an official evaluation (runner.evaluate_problems) instead of resumed.
# 1 (unmarked): run_it in a "code_utils" module, 64 KB, 1 GB, clock from start; 2: the executor above;
# 3: the answer framed (``unframe``); 4: a MemoryError is the program's error (exit 1), a memory stop is the
# memory cgroup's kill, observed by the supervisor (issue 41).
EXECUTOR_VERSION = 4

# The answer travels in a frame the wrapper writes after exec returned. The executor's child answers
# only through its result queue, so a program that ends the process itself (os._exit) has no answer
# there, whatever it printed; here the wrapper's answer descriptor is open during exec, and a program
# wrote its answer to it (os.write(3, b"42")) and left with os._exit(0) -- answered (issue 41). Output
# that is not exactly one frame is no answer. (A program that reads this frame out of its own source
# and forges it is the analogue of one that forges the executor's queue message: answered in both.)
FRAME_HEAD = b"\x00numlearn-official-answer\x00"
FRAME_TAIL = b"\x00end\x00"


def unframe(run: dict) -> dict:
    """A wrapped program's run (``runner._run``'s dict) with the frame removed from ``output``; a run
    that ended 0 without exactly one frame (the program exited on its own) is no answer: not ok."""
    raw = run.get("output") or ""
    head, tail = FRAME_HEAD.decode("latin-1"), FRAME_TAIL.decode("latin-1")
    if not run.get("ok"):
        return run | {"output": ""}
    if raw.startswith(head) and raw.endswith(tail):
        size, sep, rest = raw[len(head):-len(tail)].partition("\n")
        if sep and size.isdigit() and len(rest.encode("utf-8", "surrogatepass")) == int(size):
            return run | {"output": rest}
    return run | {"output": "", "ok": False, "error": "no answer: the program ended the executor itself "
                                                       "(its output was not the executor's result)"}

# Exit status of a program that ended by SystemExit / KeyboardInterrupt (no official result).
BASE_EXCEPTION_EXIT = 2

# What the executor's child has imported on entry: code_utils' own imports and the parent's. The
# stdlib ones are always loaded; a heavy one only when the program names it (or a package that
# imports it), so a program that never uses sympy does not pay its import. Either way the clock
# starts after them (sandbox.run_program(start=Start(..., clock_after_preload=True))).
EXECUTOR_STDLIB = ("multiprocessing", "threading", "io", "contextlib", "math", "re", "json", "warnings")
EXECUTOR_HEAVY = {"numpy": ("numpy", "np.", "scipy", "pandas", "sympy"), "sympy": ("sympy",),
                  "torch": ("torch",)}
# Bounds the official executor does not have, kept as safety bounds under the OS sandbox; the programs
# they stop are counted in each result (``n_program_memory_capped``, ``n_program_output_capped``).
EXECUTOR_MEMORY_MB = 4096
# The executor keeps stdout in a StringIO, bounded by memory alone: a 10 MB answer is answered there (it fell
# back to the CoT backup under the old 8 MB, issue 41). 256 MB: far above any answer seen, and within the
# 4 GB memory cap the StringIO shares; a program past it is counted (n_program_output_capped).
EXECUTOR_MAX_OUTPUT_BYTES = 256 << 20


def executor_preload(code: str) -> tuple[str, ...]:
    """The modules to load before ``code`` runs (see ``EXECUTOR_STDLIB`` / ``EXECUTOR_HEAVY``)."""
    heavy = tuple(m for m, cues in EXECUTOR_HEAVY.items() if any(c in code for c in cues))
    return EXECUTOR_STDLIB + heavy


def executor_run_kwargs(code: str) -> dict:
    """``sandbox.run_program`` settings for a program wrapped by ``wrap_program``."""
    from numlearn.evaluation.sandbox import Start

    return {"start": Start(executor_preload(code), clock_after_preload=True),
            "memory_mb": EXECUTOR_MEMORY_MB, "max_output_bytes": EXECUTOR_MAX_OUTPUT_BYTES}


def wrap_program(code: str) -> str:
    """A program that runs ``code`` as ``CodeExecutor.execute_code`` does (see the notes above): the
    code indented into ``run_it`` by ``format_code`` (so ``from m import *`` is a SyntaxError, and a
    ``__main__`` block does not run), exec'd in the executor's module globals under
    ``redirect_stdout``. It exits 0 writing the captured, "\\n"-stripped stdout when the exec
    returned; 1 when it raised (a MemoryError too, as in the executor: our memory cap stops a program by
    the memory cgroup's kill, which the supervisor observes); ``BASE_EXCEPTION_EXIT`` on SystemExit /
    KeyboardInterrupt. Run it with ``executor_run_kwargs``."""
    return (_WRAPPER.replace("__BASE_EXIT__", str(BASE_EXCEPTION_EXIT))
            .replace("b\"__FRAME_HEAD__\"", repr(FRAME_HEAD)).replace("b\"__FRAME_TAIL__\"", repr(FRAME_TAIL))
            .replace("__SOURCE__", repr(code)))


# -- per-digit accuracy as run_open.py prints it ("Int Number accuracy", "Decimal Number accuracy")
#
# Only problems where both the cleaned answer and the truth pass ``float()`` (``is_number``) count;
# each is split by ``parse_number_parts`` (``^\s*([+-]?)(\d+)(?:\.(\d{1,10}))?\s*$``; a string
# float() accepts but the pattern does not, e.g. "1e5", "inf" or ".5", has no digit slots: as a
# truth it adds nothing, as an answer it gets every slot wrong); integer slots from the units
# place, fraction slots from the first decimal, 20 of each; a slot counts when the truth has a digit
# there and is right when the answer has the same digit there. (The official arrays add 1e-8 per
# empty slot to the hit counts, which its 3-decimal print cannot show; not reproduced.) numlearn's
# own per-digit accuracy (``metrics.numeric_metrics``) counts every problem whose truth parses.
_PARTS = re.compile(r"^\s*([+-]?)(\d+)(?:\.(\d{1,10}))?\s*$")
DIGIT_SLOTS = 20


def _float_parses(s: str) -> bool:
    try:
        float(s)
        return True
    except (ValueError, TypeError):
        return False


def _digit_parts(s: str) -> tuple[str, str]:
    m = _PARTS.match(s)
    return (m.group(2)[::-1], m.group(3) or "") if m else ("", "")


def digit_accuracy(records: list[dict]) -> dict:
    """``digit_acc_int`` / ``digit_acc_frac`` (slot -> accuracy), their slot counts, and
    ``n_problems`` (the denominator's problems), from records' ``pred`` and ``gt`` strings."""
    from collections import Counter

    int_hit, int_tot, frac_hit, frac_tot = Counter(), Counter(), Counter(), Counter()
    n = 0
    for r in records:
        if not (_float_parses(r["pred"]) and _float_parses(r["gt"])):
            continue
        n += 1
        (gi, gf), (pi, pf) = _digit_parts(r["gt"]), _digit_parts(r["pred"])
        for k, d in enumerate(gi[:DIGIT_SLOTS]):
            int_tot[k] += 1
            int_hit[k] += k < len(pi) and pi[k] == d
        for k, d in enumerate(gf[:DIGIT_SLOTS]):
            frac_tot[k + 1] += 1
            frac_hit[k + 1] += k < len(pf) and pf[k] == d
    return {"n_problems": n,
            "digit_acc_int": {str(k): int_hit[k] / int_tot[k] for k in sorted(int_tot)},
            "digit_acc_frac": {str(k): frac_hit[k] / frac_tot[k] for k in sorted(frac_tot)},
            "digit_count_int": {str(k): int_tot[k] for k in sorted(int_tot)},
            "digit_count_frac": {str(k): frac_tot[k] for k in sorted(frac_tot)}}
