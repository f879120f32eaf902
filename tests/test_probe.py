"""The checkpoint probe (issue 42): hand-checked values at single positions, ratios of sums over problems,
model minus baseline with its sign, and the command end to end on a config-built tiny model and on
SmolLM2-135M, resumable from its store."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

from numlearn.evaluation.probe import PLACES, SUMS, compare, example_rows, position_stats, summarise
from numlearn.losses import DigitVocab

REPO = Path(__file__).resolve().parents[1]
VOCAB = DigitVocab(digit_ids=tuple(range(10)), dot_id=10)  # 0..9 digits, 10 ".", 11..15 other tokens


def _hand_batch():
    """One solution "12.5<eos>": position t predicts label t + 1; labels -100 (prompt), 1, 2, ".", 5, eos."""
    labels = torch.tensor([[-100, 1, 2, 10, 5, 11]])
    logits = torch.full((1, 6, 16), -2.0)
    logits[0, 0, :10] = 0.0
    logits[0, 0, 1] = math.log(9)  # target 1: p_1 = 9 / 18 = 0.5
    logits[0, 1, :10] = 0.0  # target 2: uniform digits, p = 0.1, argmax 0 (wrong)
    logits[0, 3, :10] = 0.0
    logits[0, 3, 5] = 5.0  # target 5: p_5 = e^5 / (e^5 + 9)
    return logits, labels


def test_position_values_by_hand():
    s = position_stats(*_hand_batch(), VOCAB)
    assert s["example"].tolist() == [0, 0, 0]
    assert [PLACES[i] for i in s["place"]] == ["tens", "units", "tenths"]
    assert s["weight"].tolist() == pytest.approx([4.0, 2.0, 1.02 ** -2])  # 1.02^-(k+1), k = 1 for tenths
    assert s["correct"].tolist() == [1.0, 0.0, 1.0]
    p5 = math.exp(5) / (math.exp(5) + 9)
    assert s["nll"].tolist() == pytest.approx([math.log(2), math.log(10), -math.log(p5)], rel=1e-5)
    h0 = 0.5 * math.log(2) + 0.5 * math.log(18)  # p = (1/2, nine of 1/18)
    assert s["entropy"].tolist() == pytest.approx([h0, math.log(10), s["entropy"][2].item()], rel=1e-5)
    assert s["digit_logit"].tolist() == pytest.approx([math.log(9) / 10, 0.0, 0.5], rel=1e-5)
    # the gap: the digits' mean logit minus the mean of the six other tokens (all -2)
    assert s["gap"].tolist() == pytest.approx([math.log(9) / 10 + 2, 2.0, 2.5], rel=1e-5)
    q0 = 18 / (18 + 6 * math.exp(-2))
    assert s["digit_mass"][0].item() == pytest.approx(q0, rel=1e-5)
    # the paper form and digit CE never lower the target; eq. 8 read literally lowers it where p_y < 0.475
    assert s["lowers_paper"].tolist() == [0, 0, 0] and s["lowers_digit_ce"].tolist() == [0, 0, 0]
    assert s["lowers_binary_entropy"].tolist() == [0, 1, 0]
    assert s["lowers_weight_binary_entropy"].tolist() == pytest.approx([0, 2.0, 0])


def test_summaries_are_ratios_of_sums_over_problems():
    """Two problems, 2 digits (1 right) and 1 digit (right): accuracy 2/3, not the mean of 1/2 and 1."""
    rows = example_rows({"example": torch.tensor([0, 0, 1]), "place": torch.tensor([1, 0, 0]),
                         **{k: torch.zeros(3) for k in SUMS},
                         "correct": torch.tensor([1.0, 0.0, 1.0]), "weight": torch.tensor([4.0, 2.0, 2.0]),
                         "lowers_code": torch.tensor([1.0, 0.0, 0.0]),
                         "lowers_weight_code": torch.tensor([4.0, 0.0, 0.0])}, 2)
    assert [r["n_digits"] for r in rows] == [2, 1]
    assert rows[0]["places"] == {"units": [1, 0.0, 0.0], "tens": [1, 1.0, 0.0]}
    s = summarise(rows, n_boot=200)
    assert s["correct"]["value"] == pytest.approx(2 / 3)
    assert s["lowers_code"]["value"] == pytest.approx(1 / 3)  # over digits
    assert s["lowers_weight_code"]["value"] == pytest.approx(4 / 8)  # over place weight
    units = s["places"]["units"]
    assert {k: units[k] for k in ("n_digits", "correct", "nll")} == {"n_digits": 2, "correct": 0.5, "nll": 0.0}
    # a units digit in each problem, one right: a resample of problem 0 twice gives 0, of problem 1 twice 1
    assert units["ci"]["correct"] == pytest.approx([0.0, 1.0]) and units["ci"]["nll"] == pytest.approx([0.0, 0.0])
    assert s["places"]["tens"]["ci"]["correct"] == pytest.approx([1.0, 1.0])  # one tens digit, right in every draw
    lo, hi = s["correct"]["ci"]
    assert 0.0 <= lo <= 2 / 3 <= hi <= 1.0


def test_model_minus_baseline_has_its_sign_and_a_paired_interval():
    def rows(correct):
        return example_rows({"example": torch.tensor([0, 1, 2]), "place": torch.zeros(3, dtype=torch.long),
                             **{k: torch.zeros(3) for k in SUMS}, "correct": torch.tensor(correct)}, 3)
    better, worse = rows([1.0, 1.0, 0.0]), rows([1.0, 0.0, 0.0])
    c = compare(better, worse, n_boot=500)
    assert c["correct"]["value"] == pytest.approx(1 / 3)  # model minus baseline
    lo, hi = c["correct"]["ci"]
    assert 0.0 <= lo <= 1 / 3 <= hi  # paired: a resample never makes the better model worse
    units = c["places"]["units"]
    assert units["correct"] == pytest.approx(1 / 3) and 0.0 <= units["ci"]["correct"][0] <= 1 / 3 <= \
        units["ci"]["correct"][1]
    same = compare(better, better, n_boot=100)
    assert same["correct"] == {"value": 0.0, "ci": [0.0, 0.0]}
    assert same["places"]["units"]["ci"] == {"correct": [0.0, 0.0], "nll": [0.0, 0.0]}  # paired draws: no spread
    with pytest.raises(ValueError, match="same solutions"):
        compare(better, better[:2])


@pytest.fixture
def tiny_pair(tmp_path, saved_tiny_model):
    """The saved tiny model, and a copy whose digit rows of the head are halved: every digit logit halves."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from numlearn.losses import resolve_vocab

    halved = tmp_path / "halved"
    shutil.copytree(saved_tiny_model, halved)
    m = AutoModelForCausalLM.from_pretrained(halved)
    ids = list(resolve_vocab(AutoTokenizer.from_pretrained(halved)).digit_ids)
    if m.config.tie_word_embeddings:
        pytest.skip("the tiny test model ties its head to the embeddings")
    with torch.no_grad():
        m.lm_head.weight[ids] *= 0.5
    m.save_pretrained(halved)
    return halved, saved_tiny_model


def test_the_command_end_to_end_resumes_and_gets_the_sign(tiny_pair, tmp_path, data_dir, monkeypatch):
    import numlearn.probe as probe

    halved, base = tiny_pair
    out = tmp_path / "probe"
    argv = [f"model_path={halved}", f"baseline={base}", "datasets=gsm8k", "n=5", f"out={out}", "n_boot=200",
            f"data_dir={data_dir}", "batch_size=2"]
    assert probe.main(argv) == 0
    cmp = json.loads(next(out.glob("*__vs__*/compare.json")).read_text())["datasets"]["gsm8k"]
    base_logit = cmp["baseline"]["digit_logit"]["value"]
    assert cmp["model"]["n_problems"] == 5 and cmp["model"]["n_digits"] > 20
    # halving the digit rows halves every digit logit: model - baseline = -0.5 x the baseline's mean
    assert cmp["difference"]["digit_logit"]["value"] == pytest.approx(-0.5 * base_logit, rel=1e-4, abs=1e-6)
    assert cmp["model"]["digit_logit"]["value"] == pytest.approx(0.5 * base_logit, rel=1e-4, abs=1e-6)
    md = next(out.glob("*__vs__*/compare.md")).read_text()
    assert probe.MIXED_NOTE in md and re.search(r"\| units \| \d+ \| [\d.]+ \[[\d.]+, [\d.]+\] \|", md)
    # a re-run measures nothing again: no model is loaded
    monkeypatch.setattr(probe, "load_model", lambda *a, **k: pytest.fail("re-run loaded a model"))
    assert probe.main(argv) == 0
    stored = json.loads(next(out.glob(f"*{probe.slug(str(halved))}/gsm8k/probe.json")).read_text())
    assert stored["n_resumed"] == 5 and stored["git"]["commit"] and stored["packages"]["torch"]


def test_an_interrupted_probe_measures_only_what_is_missing(saved_tiny_model, tmp_path, data_dir, monkeypatch):
    import numlearn.probe as probe

    out = tmp_path / "probe"
    argv = [f"model_path={saved_tiny_model}", "datasets=gsm8k", "n=6", f"out={out}", "n_boot=0",
            f"data_dir={data_dir}", "batch_size=2"]
    assert probe.main(argv) == 0
    jsonl = next(out.glob("*/gsm8k/probe.jsonl"))
    full = json.loads(next(out.glob("*/gsm8k/probe.json")).read_text())["summary"]
    lines = jsonl.read_text().splitlines()
    jsonl.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])  # killed mid-line after 3 solutions
    seen = []
    from numlearn.evaluation import probe as core

    real = core.probe_rows

    def counting(model, tok, records, *a, **k):
        seen.append(len(records))
        return real(model, tok, records, *a, **k)
    monkeypatch.setattr(core, "probe_rows", counting)
    assert probe.main(argv) == 0
    assert seen == [3]
    again = json.loads(next(out.glob("*/gsm8k/probe.json")).read_text())["summary"]
    assert again["correct"]["value"] == pytest.approx(full["correct"]["value"])
    assert again["n_digits"] == full["n_digits"]


@pytest.mark.parametrize("args, message", [
    (["baseline=x"], "model_path=<model dir or hub id> is required"),
    (["model_path=m", "batch=3"], "expected key=value with key one of"),
    (["model_path=m", "n=ten"], "n='ten': an integer"),
    (["model_path=/nonexistent/model", "datasets=nope"], "unknown benchmark 'nope'"),
])
def test_bad_input_is_one_line(args, message, capsys):
    import numlearn.probe as probe

    assert probe.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_smollm2_probe_matches_a_plain_loop(tmp_path, data_dir):
    """SmolLM2-135M (make assets): the probe's digit accuracy on two GSM8K solutions equals an independent
    count: argmax over the ten digit tokens at every digit target of the response."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = REPO / "data_cache"
    dirs = sorted(cache.glob("smollm2-135m-*/config.json"))
    tok_dir = REPO / "assets" / "tokenizers" / "smollm2"
    if not dirs or not (tok_dir / "tokenizer.json").exists():
        pytest.skip("SmolLM2-135M not prepared: run `make assets` (its GGUF is dequantised on first use)")
    model_dir = tmp_path / "smollm2"
    shutil.copytree(dirs[0].parent, model_dir)
    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(model_dir)
    import numlearn.probe as probe
    from numlearn.data.prompts import format_prompt

    out = tmp_path / "probe"
    assert probe.main([f"model_path={model_dir}", "datasets=gsm8k", "n=2", f"out={out}", "n_boot=0",
                       f"data_dir={data_dir}"]) == 0
    s = json.loads(next(out.glob("*/gsm8k/probe.json")).read_text())["summary"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    digits = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    records, _ = probe.dataset_records("gsm8k", data_dir, 2)
    right = total = 0
    for r in records:
        prompt = tok(format_prompt(r["instruction"]), add_special_tokens=False)["input_ids"]
        resp = tok(r["output"] + tok.eos_token, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + resp])
        with torch.no_grad():
            logits = model(ids).logits[0]
        for j, t in enumerate(resp):
            if t in digits:
                total += 1
                right += int(digits[int(logits[len(prompt) + j - 1, digits].argmax())] == t)
    assert s["n_digits"] == total and total > 10
    assert s["correct"]["value"] == pytest.approx(right / total)
