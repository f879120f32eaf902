"""Issue 64: GSM8K-train as programs (``numlearn.data.gsm8k_pot``), and the mixed training set whose two halves'
prompts are the evaluator's prompts for CoT and PoT, token for token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from numlearn.data.gsm8k_pot import DROP_REASONS, derive, main, prints_gold, program_of, step_name

CONF = Path(__file__).resolve().parents[1] / "conf"


def _run(program: str) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(program, "<program>", "exec"), {"__name__": "__main__"})  # our own arithmetic, read above
    return buf.getvalue()


def test_a_step_that_reuses_a_result_names_its_variable():
    answer = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
              "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")
    prog, why = program_of(answer)
    assert why is None
    assert prog == "clips_may = 48 / 2\nclips_april = 48 + clips_may\nprint(clips_april)"  # 24 is clips_may, 48 stays
    assert _run(prog) == "72.0\n" and prints_gold(_run(prog), answer)


def test_a_percentage_is_a_hundredth_and_only_the_steps_the_answer_needs_are_kept():
    answer = ("A 20% tip on $50 is <<20%*50=10>>10 dollars of tip.\n"
              "He also counts 3+4 = <<3+4=7>>7 coins.\n"
              "The bill is 50+10 = <<50+10=60>>60 dollars in total.\n#### 60")
    prog, why = program_of(answer)
    assert why is None
    assert prog.splitlines()[0] == "dollars_tip = (20 / 100) * 50"
    assert "coins" not in prog and "3 + 4" not in prog  # a step the answer does not use is left out
    assert prog.splitlines()[-2:] == ["dollars = 50 + dollars_tip", "print(dollars)"]
    assert float(_run(prog)) == 60


def test_a_literal_equal_only_to_a_rounded_result_stays_a_literal():
    answer = "Each gets 10/3 = <<10/3=3.33>>3.33 cakes.\nTwo get 3.33*2 = <<3.33*2=6.66>>6.66 cakes.\n#### 6.66"
    prog, _ = program_of(answer)
    assert "3.33 * 2" in prog  # 3.33 is not 10/3 exactly: the literal, so the program prints the gold 6.66
    assert prints_gold(_run(prog), answer)


@pytest.mark.parametrize("answer, reason", [
    ("She has 5 apples and eats none.\n#### 5", DROP_REASONS[0]),
    ("So 3+4 = <<3+4=7>>7 in all.\n#### 8", DROP_REASONS[2]),
    ("So 3+x = <<3+x=7>>7 in all.\n#### 7", DROP_REASONS[1]),
    ("So 3/0 = <<3/0=7>>7 in all.\n#### 7", DROP_REASONS[1]),
])
def test_a_solution_without_a_usable_chain_is_dropped_with_its_reason(answer, reason):
    assert program_of(answer) == (None, reason)


def test_names_are_identifiers_never_keywords_builtins_or_taken():
    assert step_name(" clips in May.", set(), 1) == "clips_may"
    assert step_name(" per hour.", set(), 2) == "hour"
    assert step_name(".", set(), 3) == "step3"
    assert step_name(" sum total.", set(), 4) == "sum_"  # the builtin sum
    assert step_name(" clips in May.", {"clips_may"}, 5) == "clips_may_2"


def test_derive_runs_every_program_in_the_sandbox_and_counts_what_it_drops():
    recs = [{"question": "Q1?", "answer": "48/2 = <<48/2=24>>24 clips.\n#### 24"},
            {"question": "Q2?", "answer": "No arithmetic.\n#### 3"},
            {"question": "Q3?", "answer": "1+1 = <<1+1=2>>2 pens.\n#### 5"}]
    d = derive(recs)
    assert [r["instruction"] for r in d.records] == ["Q1? Let's write a program."] and d.indices == [0]
    assert d.report()["dropped"] == {DROP_REASONS[0]: 1, DROP_REASONS[1]: 0, DROP_REASONS[2]: 1, DROP_REASONS[3]: 0}
    assert "bubblewrap" in d.isolation or "unsafe" in d.isolation


def test_the_command_writes_at_least_6500_programs_that_print_their_gold(data_dir, tmp_path):
    src = data_dir / "train" / "gsm8k" / "train.jsonl"
    if not src.exists():
        pytest.skip("GSM8K train not found: run `make data`")
    out, rep = tmp_path / "pot.jsonl", tmp_path / "report.json"
    assert main(["--out", str(out), "--data-dir", str(data_dir), "--report", str(rep)]) == 0
    recs = [json.loads(x) for x in out.read_text().split("\n") if x]  # split on newlines only: U+2028 is in GSM8K
    report = json.loads(rep.read_text())
    assert len(recs) == report["kept"] >= 6500 and report["total"] == 7473
    assert report["kept"] + sum(report["dropped"].values()) == 7473
    assert all(set(r) == {"instruction", "output"} for r in recs)
    gold = {json.loads(x)["question"]: json.loads(x)["answer"] for x in src.read_text().split("\n") if x}
    for r in recs[::97]:  # a spread of them, run here again as plain scripts
        assert prints_gold(_run(r["output"]), gold[r["instruction"].removesuffix(" Let's write a program.")])


def _prompt_ids(tokenizer, record, template):
    from numlearn.data.collate import IGNORE_INDEX, tokenize_records

    feats, _ = tokenize_records([record], tokenizer, 4096, template)
    return [i for i, lab in zip(feats[0]["input_ids"], feats[0]["labels"]) if lab == IGNORE_INDEX]


def test_each_half_of_the_mix_is_prompted_as_the_evaluator_prompts_its_mode(qwen_tokenizer, data_dir, tmp_path):
    """Token for token on the Qwen2.5 tokenizer: the training prompt of a CoT record is the evaluator's CoT prompt
    of the same question, and of a PoT record the evaluator's PoT prompt."""
    from numlearn.data.prompts import training_template
    from numlearn.data.sources import load_source
    from numlearn.evaluation.backends.base import SamplingConfig
    from numlearn.evaluation.benchmarks import Problem
    from numlearn.evaluation.runner import EvalTask

    if not (data_dir / "train" / "gsm8k" / "train.jsonl").exists():
        pytest.skip("GSM8K train not found: run `make data`")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=["data=gsm8k_mix", "data.limit_per_file=40"])
    recs = load_source(cfg.data, data_dir, tmp_path / "cache")
    cot = [r for r in recs if not r["instruction"].endswith("Let's write a program.")]
    pot = [r for r in recs if r["instruction"].endswith("Let's write a program.")]
    assert len(cot) == 40 and 30 <= len(pot) <= 40  # every problem as CoT, most also as a program
    template = training_template(cfg.data.template)
    for mode, half in (("cot", cot), ("pot", pot)):
        task = EvalTask("gsm8k", mode, SamplingConfig(max_new_tokens=8), tmp_path / f"{mode}.jsonl")
        for r in half[:10]:
            question = r["instruction"].removesuffix(" Let's write a program.")
            evaluator = qwen_tokenizer(task.first_prompt(Problem("0", question, "1", "1")),
                                       add_special_tokens=True)["input_ids"]
            assert _prompt_ids(qwen_tokenizer, r, template) == evaluator, (mode, question)
    assert pot[0]["output"].rstrip().splitlines()[-1].startswith("print(")


def test_data_pot_on_a_file_that_is_not_gsm8k_is_one_error(tmp_path):
    from numlearn.data.sources import DataError, load_source

    f = tmp_path / "mi.jsonl"
    f.write_text(json.dumps({"instruction": "q", "output": "a"}) + "\n")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("config", overrides=["data=gsm8k_pot", f"data.files=[{f}]"])
    with pytest.raises(DataError, match=r"data.pot='only' derives programs from GSM8K files: .*not a GSM8K record"):
        load_source(cfg.data, tmp_path, tmp_path / "cache")
