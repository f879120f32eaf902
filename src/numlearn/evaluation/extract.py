"""Answer extraction and comparison (the MAmmoTH protocol as adapted by the DEL authors; docs/evaluation.md).

Three answer kinds:
* ``number`` (gsm8k, svamp, simuleq, synthetic): after the last trigger ("The answer is", ...),
  commas removed, signed integers / decimals / fractions found; the first match after a trigger,
  else the last in the text; normalised ("5.0" -> "5", "3/4" -> "0.75").
* ``math``: the last ``\\boxed{...}`` (brace-matched), else the text after the last "=", then the
  usual MATH string normalisation.
* ``choice`` (aqua, sat, mmlu_mathematics): standalone capital letters; first after a trigger,
  else last. No letter -> "" (counted wrong; ``force_choice_letter`` reproduces the original "A").

Scoring is exact string match after normalisation, as in the original (no numeric tolerance).

That is the ``strict`` scorer (ours). The ``official`` scorer reproduces the DEL authors' own
evaluation code decision by decision (``numlearn.evaluation.official``); the scorers, chosen once by
name (``eval.protocol``), are ``numlearn.evaluation.scorers``, and both work on the same generations.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext

from .spec import BASE_TRIGGERS as TRIGGERS
from .spec import BenchmarkSpec, as_spec

_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?|-?\.\d+")
def answer_kind(benchmark: str | BenchmarkSpec) -> str:
    """``number``, ``math`` or ``choice``, from the benchmark's spec."""
    return as_spec(benchmark).answer


def _after_trigger(text: str, extra: tuple[str, ...] = ()) -> tuple[str, bool]:
    best, found = None, False
    for t in TRIGGERS + extra:
        i = text.rfind(t)
        if i >= 0 and (best is None or i + len(t) > best):
            best, found = i + len(t), True
    return (text[best:], True) if found else (text, False)


def normalize_number(s: str) -> str:
    """Canonical string of a number: "1,024" -> "1024", "5.0" -> "5", "-0.50" -> "-0.5",
    "3/4" -> "0.75" (6 decimals at most); "" when ``s`` is not a number."""
    s = s.strip().replace(",", "").replace("$", "").rstrip(".")
    if not s:
        return ""
    # models emit digit strings far longer than Decimal's default 28-digit context
    with localcontext() as ctx:
        ctx.prec = max(64, 2 * len(s))
        try:
            if "/" in s:
                a, b = s.split("/", 1)
                if Decimal(b) == 0:
                    return ""
                d = (Decimal(a) / Decimal(b)).quantize(Decimal("0.000001"))
            else:
                d = Decimal(s)
        except (InvalidOperation, ValueError):
            return ""
        if not d.is_finite():
            return ""
        if d == d.to_integral_value():
            out = format(d.to_integral_value(), "f")  # not str(int(d)): 4,300-digit limit
        else:
            out = format(d, "f").rstrip("0").rstrip(".")
    return "0" if out in ("-0", "") else out


def extract_number(text: str, extra_triggers: tuple[str, ...] = ()) -> str:
    tail, found = _after_trigger(text, extra_triggers)
    nums = _NUM.findall(tail.replace(",", ""))
    if not nums:
        return ""
    return normalize_number(nums[0] if found else nums[-1])


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched; None if absent."""
    i = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if i < 0:
        return None
    j = text.find("{", i)
    if j < 0:
        m = re.match(r"\\boxed ([^\s$]+)", text[i:])
        return m.group(1) if m else None
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1 : k]
    return None


def _fix_fracs(s: str) -> str:
    # "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}"
    parts = s.split("\\frac")
    out = parts[0]
    for p in parts[1:]:
        out += "\\frac"
        if p.startswith("{") or len(p) < 2:
            out += p
            continue
        a, rest = p[0], p[1:]
        if rest.startswith("{"):
            out += "{" + a + "}" + rest
        else:
            out += "{" + a + "}{" + rest[0] + "}" + rest[1:]
    return out


def _fix_a_slash_b(s: str) -> str:
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}" if m else s


def _fix_sqrt(s: str) -> str:
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)


def normalize_math(s: str) -> str:
    """The usual MATH answer normalisation (Hendrycks et al.): strip spacing, units, dollars,
    degree marks, ``\\left``/``\\right``, ``dfrac``/``tfrac``; fix ``\\frac12`` and ``a/b``;
    drop a leading "x =" and a leading zero-less decimal gets its "0"."""
    s = str(s).strip().replace("\n", "").rstrip(".")
    s = s.replace("\\!", "").replace("\\\\", "\\").replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "").replace("$", "")
    # units after a value ("10\text{ cm}") go; a bare text answer ("\text{Evelyn}") is unwrapped
    s = re.sub(r"(?<=[\d}])\s*\\(?:text|mbox)\{\s*[a-zA-Z ]*\}$", "", s).strip()
    s = re.sub(r"^\\(?:text|textbf|mbox)\{([^{}]*)\}$", r"\1", s).strip()
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    m = re.match(r"^[a-zA-Z]\s*=\s*(.+)$", s)
    if m and len(s.split("=")[0].strip()) <= 2:
        s = m.group(1)
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    s = _fix_a_slash_b(s)
    return s


def extract_math(text: str) -> str:
    box = last_boxed(text)
    if box is None:
        tail, found = _after_trigger(text)
        if found:
            box = tail.strip().rstrip(".")
        elif "=" in text:
            box = text.rsplit("=", 1)[1].strip()
        else:
            nums = _NUM.findall(text.replace(",", ""))
            box = nums[-1] if nums else ""
    return normalize_math(box) if box else ""


def extract_choice(text: str, letters: str = "ABCDE", force_letter: bool = False,
                   extra_triggers: tuple[str, ...] = ()) -> str:
    tail, found = _after_trigger(text, extra_triggers)
    hits = re.findall(rf"\b([{letters}])\b", tail)
    if hits:
        return hits[0] if found else hits[-1]
    return letters[0] if force_letter else ""


def strict_extract(spec: BenchmarkSpec, completion: str, force_choice_letter: bool = False) -> str:
    if spec.answer == "number":
        return extract_number(completion, spec.triggers)
    if spec.answer == "math":
        return extract_math(completion)
    return extract_choice(completion, spec.choice_letters, force_choice_letter, spec.triggers)


def strict_truth(spec: BenchmarkSpec, answer) -> str:
    if spec.answer == "number":
        return normalize_number(str(answer))
    if spec.answer == "math":
        return normalize_math(str(answer))
    return str(answer).strip().upper()


def strict_is_correct(spec: BenchmarkSpec, pred: str, ground_truth) -> bool:
    if pred == "":
        return False
    truth = strict_truth(spec, ground_truth)
    if spec.answer == "number":
        return normalize_number(pred) == truth
    if spec.answer == "math":
        return normalize_math(pred) == truth
    return pred.strip().upper() == truth


def is_equivalent_symbolic(pred: str, truth: str) -> bool | None:
    """Symbolic equivalence for MATH via math-verify (optional extra ``mathverify``); None when
    the package is not installed. Reported separately from the exact-match metric."""
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    try:
        return bool(verify(parse(f"${truth}$"), parse(f"${pred}$")))
    except Exception:  # noqa: BLE001 - the parser raises many types on odd LaTeX
        return False
