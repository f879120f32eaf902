"""Synthetic generator, tokenizer, training-data conversion."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from numlearn.data import synthetic
from numlearn.data.collate import IGNORE_INDEX, PadCollator, tokenize_records
from numlearn.data.sources import DataError, convert_record, load_local
from numlearn.evaluation.sandbox import run_program


def test_same_seed_is_byte_identical(tmp_path):
    a = synthetic.write_split(tmp_path / "a.jsonl", synthetic.generate("train", 300, seed=7))
    b = synthetic.write_split(tmp_path / "b.jsonl", synthetic.generate("train", 300, seed=7))
    c = synthetic.write_split(tmp_path / "c.jsonl", synthetic.generate("train", 300, seed=8))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_splits_are_disjoint_and_ood_has_longer_numbers():
    train = synthetic.generate("train", 5000)
    val = synthetic.generate("val", 300)
    test = synthetic.generate("test", 300)
    ood = synthetic.generate("test_ood", 300)
    assert not {p.key for p in train} & {p.key for p in test}
    assert not {p.key for p in train} & {p.key for p in val}
    assert not {p.key for p in val} & {p.key for p in test}
    assert not {p.key for p in train} & {p.key for p in ood}
    assert len({p.key for p in train}) == len(train)
    longest = lambda ps: max(len(n) for p in ps for n in re.findall(r"\d+", p.question))  # noqa: E731
    assert longest(ood) > longest(train)


def test_problems_cover_what_the_losses_are_about():
    ps = synthetic.generate("train", 600)
    assert {p.template for p in ps} == set(synthetic.TEMPLATES)
    assert any("$" in p.question for p in ps)  # money
    assert any(re.search(r"\d\.\d", p.answer) for p in ps)  # decimals
    assert any(p.cot.count("=") >= 2 for p in ps)  # multi-step with intermediate results
    lengths = {len(n) for p in ps for n in re.findall(r"\d+", p.question)}
    assert len(lengths) >= 2
    for p in ps:
        assert p.cot.endswith(f"The answer is {p.answer}.")


def test_column_arithmetic_by_hand():
    assert synthetic.column_add("47", "35") == (["7 + 5 = 12", "4 + 3 + 1 = 8"], "82")
    assert synthetic.column_add("99", "5") == (["9 + 5 = 14", "9 + 0 + 1 = 10"], "104")
    assert synthetic.column_add("2.45", "3.70") == (["5 + 0 = 5", "4 + 7 = 11", "2 + 3 + 1 = 6"], "6.15")
    # a borrowed-from digit is written already reduced: 8 -> 7 after 3 borrowed
    assert synthetic.column_sub("83", "47") == (["13 - 7 = 6", "7 - 4 = 3"], "36")
    assert synthetic.column_sub("20.00", "13.47") == (["10 - 7 = 3", "9 - 4 = 5", "9 - 3 = 6", "1 - 1 = 0"], "6.53")
    assert synthetic.column_mul(6, "47") == (["6 * 7 = 42", "6 * 4 + 4 = 28"], "282")
    assert synthetic.worked("47", "+", "35", "82") == "47 + 35: 7 + 5 = 12, 4 + 3 + 1 = 8, so 82."
    assert synthetic.worked("7", "+", "5", "12") == "7 + 5 = 12."  # one column: nothing to work out
    with pytest.raises(AssertionError, match="expected 83"):
        synthetic.worked("47", "+", "35", "83")
    with pytest.raises(ValueError, match="x >= y"):
        synthetic.column_sub("12", "47")


def test_column_arithmetic_agrees_with_decimal_everywhere():
    import random
    from decimal import Decimal

    rng = random.Random(0)
    for _ in range(3000):
        x = Decimal(rng.randint(0, 99999)) / 10 ** rng.randint(0, 3)
        y = Decimal(rng.randint(0, 99999)) / 10 ** rng.randint(0, 3)
        x, y = max(x, y), min(x, y)
        f = max(-x.as_tuple().exponent, -y.as_tuple().exponent)
        q = Decimal(1).scaleb(-f)
        assert synthetic.column_add(str(x), str(y))[1] == str((x + y).quantize(q))
        assert synthetic.column_sub(str(x), str(y))[1] == str((x - y).quantize(q))
        k, n = rng.randint(2, 9), rng.randint(0, 9999)
        assert synthetic.column_mul(k, str(n))[1] == str(k * n)


@pytest.mark.parametrize("split", ["test", "test_ood"])
def test_pot_programs_print_the_answer(split):
    for p in synthetic.generate(split, 12):
        r = run_program(p.pot, timeout_s=10)
        assert r.ok, r.error
        assert synthetic.fmt_num(__import__("decimal").Decimal(r.stdout.strip())) == p.answer


def test_tokenize_masks_prompt_and_counts_truncation(tiny_tokenizer):
    recs = [{"instruction": "What is 2 + 3?", "output": "2 + 3 = 5. The answer is 5."}]
    feats, rep = tokenize_records(recs, tiny_tokenizer, max_length=512)
    f = feats[0]
    n_resp = sum(x != IGNORE_INDEX for x in f["labels"])
    assert tiny_tokenizer.decode([x for x in f["labels"] if x != IGNORE_INDEX]) == \
        "2 + 3 = 5. The answer is 5." + tiny_tokenizer.eos_token
    assert f["labels"][-1] == tiny_tokenizer.eos_token_id and n_resp < len(f["labels"])
    feats, rep = tokenize_records(recs, tiny_tokenizer, max_length=len(f["input_ids"]) - 3)
    assert rep.n_truncated == 1 and len(feats[0]["input_ids"]) == len(f["input_ids"]) - 3
    feats, rep = tokenize_records(recs, tiny_tokenizer, max_length=4)
    assert rep.n_dropped_empty == 1 and not feats
    batch = PadCollator(tiny_tokenizer.pad_token_id)([f, {"input_ids": [1, 2], "labels": [IGNORE_INDEX, 2]}])
    assert batch["input_ids"].shape == batch["labels"].shape
    assert (batch["labels"][1, 2:] == IGNORE_INDEX).all() and batch["attention_mask"][1, 2:].sum() == 0


def test_gsm8k_and_math_conversion():
    g = convert_record({"question": "Q?", "answer": "It is 2*3 = <<2*3=6>>6.\n#### 1,006"})
    assert g == {"instruction": "Q?", "output": "It is 2*3 = 6.\nThe answer is 1,006."}
    m = convert_record({"problem": "P", "solution": "so $\\boxed{4}$"})
    assert m["output"].endswith("\\boxed{4}$")
    with pytest.raises(DataError, match="malformed training record"):
        convert_record({"text": "x"}, "f.jsonl:3")


def test_local_files_from_shared_data(data_dir):
    recs = load_local(data_dir / "train" / "gsm8k" / "train.jsonl", limit=50)
    assert len(recs) == 50 and all(r["output"].rstrip().endswith(".") for r in recs)
    assert "<<" not in recs[0]["output"]
    recs = load_local(data_dir / "train" / "math" / "orgn-MATH-train.jsonl", limit=5)
    assert "\\boxed" in recs[0]["output"]


def test_mathinstruct_style_local_file_and_errors(tmp_path):
    f = tmp_path / "mi.json"
    f.write_text(json.dumps([{"instruction": "2+2?", "output": "The answer is 4", "source": "x"}]))
    assert load_local(f) == [{"instruction": "2+2?", "output": "The answer is 4"}]
    with pytest.raises(DataError, match="not found"):
        load_local(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "a", "output": "b"}\n{oops\n')
    with pytest.raises(DataError, match="bad.jsonl:2"):
        load_local(bad)


# ---------------------------------------------------------------- the authors' training format
def test_official_templates_are_the_authors_twelve_and_one_is_drawn_per_run():
    from numlearn.data.prompts import ALPACA, official_templates, training_template

    t = official_templates()
    assert len(t) == 12 and len({x["prompt_no_input"] for x in t}) == 12  # no duplicated variant
    assert t[0]["prompt_no_input"].replace("{instruction}", "{query}") == ALPACA  # = the eval prompt
    # the authors' second template really has no blank line before "### Instruction" (kept as is)
    assert "response.### Instruction:" in t[1]["prompt_no_input"]
    draws = [training_template("official", seed) for seed in range(12)]
    assert [d.index for d in draws] == [training_template("official", s).index for s in range(12)]  # seeded
    assert len({d.index for d in draws}) > 3
    d = draws[0]
    assert d("Q?") == t[d.index]["prompt_no_input"].format(instruction="Q?")
    assert d("Q?", "ctx") == t[d.index]["prompt_input"].format(instruction="Q?", input="ctx")
    with pytest.raises(ValueError, match="data.template=official"):
        training_template("random")


def test_one_template_formats_every_example_of_a_run(tiny_tokenizer):
    from numlearn.data.prompts import official_templates, training_template

    tmpl = training_template("official", 3)
    recs = [{"instruction": f"What is {i} + 1?", "output": f"The answer is {i + 1}."} for i in range(5)]
    feats, _ = tokenize_records(recs, tiny_tokenizer, 512, tmpl)
    head = official_templates()[tmpl.index]["prompt_no_input"].split("{instruction}")[0]
    for f in feats:
        prompt = tiny_tokenizer.decode([x for x, y in zip(f["input_ids"], f["labels"]) if y == IGNORE_INDEX])
        assert prompt.startswith(head)


# What the joint boundary (the authors' `tok(prompt + response)` with `len(tok(prompt))` masked)
# does with each family's real tokenizer, against the split form (prompt and response apart):
# (family, response) -> (joint drops a first target that split has, split's first target).
BOUNDARY_CASES = {
    # Qwen2.5 BPE merges the prompt's ":" with a leading newline (":\n" is one token), so under
    # joint the response's "\n" is inside a masked token; split trains it.
    ("qwen2.5", "\n12 + 7 = 19."): (True, "\u010a"),
    ("qwen2.5", "12 + 7 = 19."): (False, "1"),
    ("deepseek-llm", "\n12 + 7 = 19."): (False, "\u010a"),
    # SentencePiece (Llama-2 / Mistral): a separately tokenised response starts with an extra "▁".
    ("llama2-spm", "12 + 7 = 19."): (True, "\u2581"),
    ("mistral-v1", "12 + 7 = 19."): (True, "\u2581"),
}


@pytest.mark.parametrize("family,response", sorted(BOUNDARY_CASES))
def test_joint_and_split_boundaries_with_real_tokenizers(shared_tokenizers, family, response):
    from transformers import AutoTokenizer

    from numlearn.data.prompts import training_template

    tok = AutoTokenizer.from_pretrained(shared_tokenizers / family)
    rec = [{"instruction": "What is 12 + 7?", "output": response}]
    tmpl = training_template("alpaca")
    split, _ = tokenize_records(rec, tok, 2000, tmpl, "split")
    joint, _ = tokenize_records(rec, tok, 2000, tmpl, "joint")
    s_t = [x for x in split[0]["labels"] if x != IGNORE_INDEX]
    j_t = [x for x in joint[0]["labels"] if x != IGNORE_INDEX]
    n_prompt = len(tok(tmpl("What is 12 + 7?"))["input_ids"])
    assert sum(x == IGNORE_INDEX for x in joint[0]["labels"]) == n_prompt  # the official mask length
    assert joint[0]["input_ids"] == tok(tmpl("What is 12 + 7?") + response + tok.eos_token)["input_ids"]
    assert s_t[-1] == j_t[-1] == tok.eos_token_id
    drops, first = BOUNDARY_CASES[(family, response)]
    assert tok.convert_ids_to_tokens(s_t[0]) == first
    assert (len(j_t) == len(s_t) - 1 and j_t == s_t[1:]) is drops
    if not drops:
        assert j_t == s_t
    with pytest.raises(ValueError, match="data.boundary"):
        tokenize_records(rec, tok, 2000, tmpl, "both")


def test_make_data_fills_the_data_root_from_a_mirror_and_refuses_bad_checksums(data_dir, tmp_path, capsys):
    from numlearn.data.fetch import fetch, wanted_files

    wanted = wanted_files()
    assert {"gsm8k", "math", "aqua", "sat", "svamp", "simuleq", "mmlu_mathematics", "math_train"} <= \
        {w["name"] for w in wanted}
    assert all(len(w["sha256"]) == 64 and w["url"].startswith("https://") for w in wanted)
    out = tmp_path / "data"
    assert fetch(out, ["sat", "gsm8k"], mirror=data_dir) == 0
    assert (out / "benchmarks" / "sat" / "sat.json").read_bytes() == (data_dir / "benchmarks" / "sat" / "sat.json").read_bytes()
    assert (out / "train" / "gsm8k" / "train.jsonl").exists()  # the gsm8k data config's training file
    bad = tmp_path / "mirror" / "benchmarks" / "aqua"
    bad.mkdir(parents=True)
    (bad / "AQuA.json").write_text("{}\n")
    assert fetch(out, ["aqua"], mirror=tmp_path / "mirror") == 1
    assert not (out / "benchmarks" / "aqua" / "AQuA.json").exists()
    assert "not written" in capsys.readouterr().err


@pytest.mark.parametrize("content,message", [
    (b"", "the file is empty"),
    (b"\xff\xfe\x00bad", "not UTF-8 text"),
    (b"5\n", "a record must be a JSON object, got int"),
    (b'{"instruction": "q", "output": "a"}\n{"instruction": ', "not valid JSON"),
    (b'[{"instruction": "q", "output": "a"}, 3]', "a record must be a JSON object, got int"),
])
def test_bad_data_files_are_one_clear_error(tmp_path, content, message):
    from numlearn.data.sources import read_records

    f = tmp_path / ("d.json" if content.startswith(b"[") else "d.jsonl")
    f.write_bytes(content)
    with pytest.raises(DataError, match=message) as e:
        read_records(f)
    assert str(f) in str(e.value)


def test_cached_splits_are_keyed_by_generator_and_verified(tmp_path, capsys, caplog):
    paths = synthetic.ensure_synthetic(tmp_path, 0, 20, 0, seed=3)
    p = paths["test"]
    assert synthetic.generator_key() in p.parts and p.with_name(p.name + ".sha256").exists()
    original = p.read_bytes()
    p.write_bytes(original.replace(b'"answer"', b'"answer_"', 1))  # tampered or half-written cache
    again = synthetic.ensure_synthetic(tmp_path, 0, 20, 0, seed=3)["test"]
    assert again == p and p.read_bytes() == original
    assert "fails its checksum" in caplog.text


def test_generator_key_names_the_loaded_code_not_the_file_on_disk(tmp_path, monkeypatch):
    """A process that imported the generator and whose source file was then edited keeps writing
    under its own code's key (the bug: a training run's held-out split, made by the old code,
    landed under the edited code's key and poisoned the next run's cache)."""
    key = synthetic.generator_key()
    assert key == synthetic._source_key()  # unedited: the file is the code
    edited = tmp_path / "synthetic.py"
    edited.write_text("# edited on disk after import\n")
    monkeypatch.setattr(synthetic, "__file__", str(edited))
    assert synthetic._source_key() != key  # what hashing at call time would now give
    assert synthetic.generator_key() == key
    p = synthetic.ensure_synthetic(tmp_path / "cache", 0, 5, 0, seed=0)["test"]
    assert key in p.parts


def test_concurrent_processes_generate_the_same_cache_safely(tmp_path):
    """make reproduce-table1 JOBS=2 starts two runs that both generate the training split."""
    import subprocess
    import sys

    code = ("import sys; from numlearn.data.synthetic import ensure_synthetic; "
            "print(ensure_synthetic(sys.argv[1], 4000, 50, 0, seed=0)['train'])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-400:] for o in outs]
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1
    train = __import__("pathlib").Path(paths.pop())
    import hashlib
    assert hashlib.sha256(train.read_bytes()).hexdigest() == train.with_name(train.name + ".sha256").read_text().strip()
    assert not list(train.parent.glob("*.tmp"))


def test_a_tokenizer_cache_another_rank_finished_first_is_taken_and_ours_removed(tmp_path, monkeypatch):
    """Every rank of a multi-process run trains the cached tokenizer at once (before any barrier). Each
    saves into a directory of its own (named by its pid) and renames it into place; the one that loses
    the race keeps the winner's copy and leaves nothing behind. (With one shared temporary name, a
    rank's save could land in the directory another had just renamed into place while a third read it.)"""
    import os

    from numlearn.data import tokenizer as tk

    texts = [f"What is {i} plus {i * 7}? The answer is {i * 8}." for i in range(200)]
    real_train, dirs = tk.train_tokenizer, []

    class PeerFirst:  # the trained tokenizer; while this rank saves, a peer renames its own copy into place
        def __init__(self, tok):
            self.tok = tok

        def save_pretrained(self, directory):
            directory = Path(directory)
            dirs.append(directory.name)
            final = directory.with_name(directory.name.split(".")[0])
            self.tok.save_pretrained(final)
            self.tok.save_pretrained(directory)

    monkeypatch.setattr(tk, "train_tokenizer", lambda *a: PeerFirst(real_train(*a)))
    tok = tk.cached_tokenizer(texts, tmp_path, 300)
    assert dirs == [f"{dirs[0].split('.')[0]}.{os.getpid()}.tmp"]  # this process's own name
    assert [p.name for p in tmp_path.iterdir()] == [dirs[0].split(".")[0]]  # the winner's copy, no *.tmp left
    assert tok("12 + 7 = 19").input_ids == real_train(texts, 300)("12 + 7 = 19").input_ids


def test_a_field_of_another_type_is_refused_not_coerced(tmp_path):
    """Issue 41: {"instruction": ["a"], "output": 5} was trained as "['a']" -> "5". Refused with file:line."""
    f = tmp_path / "t.jsonl"
    f.write_text('{"instruction": "ok", "output": "fine"}\n{"instruction": ["a"], "output": 5}\n')
    with pytest.raises(DataError, match=r"t\.jsonl:2: field 'instruction' is a list \(\"\['a'\]\"\), expected a string"):
        load_local(f)
    with pytest.raises(DataError, match="field 'output' is a int"):
        convert_record({"instruction": "x", "output": 5}, "f:1")
    with pytest.raises(DataError, match="field 'question' is a NoneType"):
        convert_record({"question": None, "answer": "so #### 4"}, "f:1")


def test_a_field_over_the_bound_is_refused_before_tokenising(tmp_path):
    """One 30 MB line drove training to 15 GB; a field over data.max_field_chars (200,000 by default)
    refuses its record in one line naming the option; a raised bound admits it."""
    from numlearn.data.sources import MAX_FIELD_CHARS

    f = tmp_path / "big.jsonl"
    f.write_text('{"instruction": "q", "output": "' + "7" * (MAX_FIELD_CHARS + 1) + '"}\n')
    with pytest.raises(DataError, match=r"big\.jsonl:1: field 'output' has 200,001 characters.*data\.max_field_chars"):
        load_local(f)
    assert len(load_local(f, max_chars=MAX_FIELD_CHARS + 1)[0]["output"]) == MAX_FIELD_CHARS + 1
