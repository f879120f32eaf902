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
* programs: run as ``CodeExecutor`` runs them -- the code indented into ``def run_it():`` and
  called, in a module whose ``__name__`` is not ``"__main__"``; the answer is its stdout (newlines
  stripped), or "" when it raised or timed out (5 s).
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


def wrap_program(code: str) -> str:
    """``code_utils.format_code`` plus the executor's module context: every line indented into
    ``run_it`` (so ``from m import *`` is a SyntaxError there, and a ``__main__`` block does not
    run, since the code executes in a module that is not ``__main__``)."""
    body = "".join("  " + line + "\n" for line in code.split("\n"))
    return '__name__ = "code_utils"\ndef run_it():\n' + body + "run_it()"
