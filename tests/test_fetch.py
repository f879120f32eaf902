"""``python -m numlearn.fetch`` (issue 60 item 6): what a compute node without internet needs for a paper preset,
each item's resolved commit recorded with the override that pins it; ``model.revision`` reaches from_pretrained."""

from __future__ import annotations

import json

import pytest

from numlearn import fetch


def test_the_dry_run_lists_the_presets_model_and_data_with_their_pins(capsys):
    assert fetch.main(["--experiment", "table1_qwen2.5-1.5b", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model      Qwen/Qwen2.5-1.5B @ main  (pin: model.revision=<sha>)" in out
    assert "dataset    TIGER-Lab/MathInstruct @ main  (pin: data.load_kwargs.revision=<sha>)" in out
    assert fetch.main(["--experiment", "table1_qwen2.5-1.5b", "--dry-run", "--released"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint Zzh-tju/qwen2.5-1.5B @ main" in out and out.count("Qwen/Qwen2.5-1.5B @") == 1  # once each
    assert fetch.main(["--experiment", "table1_tiny", "--dry-run"]) == 0  # a local preset needs nothing
    assert "table1_tiny: 0 hub item(s)" in capsys.readouterr().out


def test_a_fetch_records_each_commit_and_the_pin_and_a_pinned_revision_is_asked_for(tmp_path, monkeypatch, capsys):
    from numlearn.cli import preset_config

    cfg = preset_config("table1_qwen2.5-1.5b", ["model.revision=abc123", "+data.load_kwargs.revision=d00d"],
                        config="config")
    items = fetch.items_of(cfg)
    assert [(i.kind, i.repo, i.revision) for i in items] == [("model", "Qwen/Qwen2.5-1.5B", "abc123"),
                                                            ("dataset", "TIGER-Lab/MathInstruct", "d00d")]
    asked = []

    def fake(item):
        asked.append((item.repo, item.revision))
        return {"model": "c" * 40, "dataset": "e" * 40}[item.kind]

    recs = fetch.fetch(items, resolver=fake, say=lambda m: None)
    assert asked == [("Qwen/Qwen2.5-1.5B", "abc123"), ("TIGER-Lab/MathInstruct", "d00d")]
    assert [r["pin"] for r in recs] == ["model.revision=" + "c" * 40, "data.load_kwargs.revision=" + "e" * 40]
    monkeypatch.setattr(fetch, "resolve", fake)
    monkeypatch.setattr(fetch.fetch, "__defaults__", (fake, print))
    assert fetch.main(["--experiment", "table1_qwen2.5-1.5b", "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "table1_qwen2.5-1.5b.json").read_text())
    assert [i["commit"] for i in rec["items"]] == ["c" * 40, "e" * 40] and "gsm8k" in rec["benchmark_files"]
    assert "pin them: model.revision=" in capsys.readouterr().out


def test_an_item_the_hub_cannot_serve_is_one_line_naming_it(monkeypatch, capsys):
    def offline(item):
        raise OSError("We couldn't connect to 'https://huggingface.co'\nmore lines")

    monkeypatch.setattr(fetch.fetch, "__defaults__", (offline, print))
    assert fetch.main(["--experiment", "table1_qwen2.5-1.5b", "--out", "/nonexistent/never"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("numlearn.fetch: error: model Qwen/Qwen2.5-1.5B: the hub did not serve")
    assert "OSError: We couldn't connect" in err[0]


def test_a_pinned_revision_reaches_from_pretrained(monkeypatch):
    import transformers
    from omegaconf import OmegaConf

    from numlearn.training.model import build_model

    seen = {}

    class Stop(Exception):
        pass

    def capture(name, **kw):
        seen.update(name=name, **kw)
        raise Stop

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", capture)
    cfg = OmegaConf.create({"name": "q", "source": "pretrained", "name_or_path": "Qwen/Qwen2.5-1.5B",
                            "revision": "abc123", "dtype": "float32"})
    with pytest.raises(Stop):
        build_model(cfg, tokenizer=None, cache_dir="unused", seed=0)
    assert seen["name"] == "Qwen/Qwen2.5-1.5B" and seen["revision"] == "abc123"
