"""One model's row with intervals over problems (``numlearn.reporting.one_model``): hand-checkable values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from numlearn.reporting import one_model


def _write(root: Path, bench: str, mode: str, correct: list[int], tokens=None, seconds=None, reused=0) -> Path:
    d = root / bench / mode
    d.mkdir(parents=True, exist_ok=True)
    n = len(correct)
    gen = {"n_generated": n, "reused_completions": reused, "n_backup_generations": 0}
    if tokens is not None:
        gen.update(generated_tokens=tokens, backend_generate_seconds=seconds, tokens_per_s=round(tokens / seconds, 1))
    (d / "result.json").write_text(json.dumps({
        "benchmark": {"name": bench}, "mode": mode, "protocol": "official",
        "metrics": {"accuracy": sum(correct) / n, "n": n}, "correct_by_id": {str(i): bool(c) for i, c in enumerate(correct)},
        "run": {"loss": "base", "model": "coder", "model_path": "/m"}, "generation": gen,
        "config": {"eval": {"limit": n}}}))
    return d / "result.json"


def test_wilson_by_hand():
    # 0 of 4: [0, z^2 / (n + z^2)] = [0, 3.8415 / 7.8415]
    lo, hi = one_model.wilson(0, 4)
    assert lo == 0.0 and hi == pytest.approx(3.841459 / 7.841459, abs=1e-6)
    # 2 of 4: symmetric around 0.5; half-width z*sqrt(1/16 + z^2/64) / (1 + z^2/4)
    z = one_model.Z95
    lo, hi = one_model.wilson(2, 4)
    half = z * math.sqrt(0.0625 + z * z / 64) / (1 + z * z / 4)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half)) and hi - lo == pytest.approx(0.6999, abs=1e-4)
    with pytest.raises(ValueError, match="at least one problem"):
        one_model.wilson(0, 0)


def test_report_cells_mean_and_throughput(tmp_path):
    ev = tmp_path / "eval_in"
    _write(ev, "gsm8k", "cot", [1, 0, 0, 0], tokens=400, seconds=10.0)
    _write(ev, "gsm8k", "paper", [1, 1, 0, 0], tokens=100, seconds=5.0, reused=4)
    _write(ev, "aqua", "cot", [1, 1, 1, 1], tokens=300, seconds=5.0)
    s = one_model.report([ev], tmp_path / "out", command="cmd")
    got = {(c["benchmark"], c["mode"]): (c["correct"], c["n"], c["accuracy"]) for c in s["cells"]}
    assert got == {("gsm8k", "cot"): (1, 4, 25.0), ("gsm8k", "paper"): (2, 4, 50.0), ("aqua", "cot"): (4, 4, 100.0)}
    cot = next(m for m in s["macc"] if m["mode"] == "cot")
    assert cot["macc"] == pytest.approx(62.5) and cot["benchmarks"] == ["aqua", "gsm8k"]
    # aqua is all correct in every draw; gsm8k's resampled accuracy is k/4, so the mean is 50 + 12.5 k
    assert 50.0 <= cot["ci_low"] <= 62.5 <= cot["ci_high"] <= 100.0
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| gsm8k | 25.0 [" in table and "(1/4)" in table and "| all | | | | | 800 | 20.0 | 40.0 |" in table
    assert "*paper: Qwen2.5-1.5B* | *del* | *55.4*" in table
    # the copies re-derive the same table
    s2 = one_model.report([tmp_path / "out" / "eval"], tmp_path / "out2", command="cmd")
    assert s2["cells"] == s["cells"] and s2["macc"] == s["macc"]


def test_two_models_are_refused(tmp_path):
    ev = tmp_path / "e"
    _write(ev, "gsm8k", "cot", [1, 0])
    f = _write(ev, "svamp", "cot", [1, 0])
    d = json.loads(f.read_text())
    d["run"]["loss"] = "mle"
    f.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="one model's"):
        one_model.report([ev], tmp_path / "out")


def test_the_fenced_pot_secondary_runs_the_fenced_block_and_keeps_the_paper_verdict_beside_it():
    """experiments/fenced_pot.py (issue 64 item 4): the first fenced block alone is run and scored by the official
    scorer; a completion without one gives no answer; the paper protocol's verdict of the line stays beside it."""
    import importlib.util
    from pathlib import Path

    from numlearn.evaluation.spec import as_spec

    path = Path(__file__).resolve().parents[1] / "experiments" / "fenced_pot.py"
    mod_spec = importlib.util.spec_from_file_location("fenced_pot", path)
    fp = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(fp)
    assert fp.fenced_block("Here:\n```python\nprint(6*7)\n```\nThe answer is 42.") == "print(6*7)\n"
    assert fp.fenced_block("```py\nx = 1\n```") == "x = 1\n" and fp.fenced_block("```\nprint(1)\n```") == "print(1)\n"
    assert fp.fenced_block("print(42)") is None
    runs = {"print(6*7)\n": {"ok": True, "output": "42\n"}, "print(41)\n": {"ok": True, "output": "41\n"},
            "raise SystemExit(1)\n": {"ok": False, "output": ""}}

    def line(completion, correct):
        return {"id": "1", "gt_raw": "42", "correct": correct, "attempts": [{"kind": "pot", "completion": completion}]}

    gsm8k = as_spec("gsm8k")
    right = fp.score_line(line("Sure!\n```python\nprint(6*7)\n```", False), gsm8k, runs.__getitem__)
    assert right == {"id": "1", "fenced": True, "ran": True, "pred": "42", "correct_fenced": True,
                     "correct_paper": False}
    wrong = fp.score_line(line("```python\nprint(41)\n```", False), gsm8k, runs.__getitem__)
    assert wrong["ran"] and not wrong["correct_fenced"]
    failed = fp.score_line(line("```python\nraise SystemExit(1)\n```", False), gsm8k, runs.__getitem__)
    assert failed["fenced"] and not failed["ran"] and failed["pred"] == ""
    plain = fp.score_line(line("print(6*7)", True), gsm8k, lambda c: pytest.fail("no fence: nothing is run"))
    assert plain == {"id": "1", "fenced": False, "ran": False, "pred": "", "correct_fenced": False,
                     "correct_paper": True}
    md = fp.table({"gsm8k": [right, wrong, failed, plain]})
    assert "| gsm8k | 4 | 3 | 2 | 25.0 [" in md and "(1/4) |" in md
