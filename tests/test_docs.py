"""The README and docs/ cannot drift from the committed results: tables are copied blocks, every
decimal number in a results region is a value of the files it names, and every relative link
resolves. Plus hand-built documents the checker must refuse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from numlearn.reporting.docs import check_text, section, sync_text

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_committed_docs_match_the_committed_results(doc):
    problems = check_text(doc.read_text(encoding="utf-8"), REPO, doc.name, str(doc.parent.relative_to(REPO)))
    assert not problems, "\n".join(map(str, problems))


def test_the_results_pages_declare_their_sources():
    for doc in ("README.md", "docs/results.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        assert "<!-- numbers-from: results/table1_tiny results/sweep_alpha -->" in text, doc
        assert "<!-- include: results/table1_tiny/table1.md#" in text, doc


def test_readme_is_a_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 10_240
    heads = re.findall(r"^## (.*)$", text, re.M)
    assert heads[:2] == ["Two commands", "The result table"] and heads[-1] == "Citation and licence"
    assert "**Contents:**" in text and "make test" in text and "make reproduce-table1" in text


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


# -- the checker itself, on hand-built files ---------------------------------------------------------
@pytest.fixture
def root(tmp_path):
    (tmp_path / "results" / "t").mkdir(parents=True)
    (tmp_path / "results" / "t" / "table.md").write_text(
        "<!-- generated -->\n- git: abc\n\n## Main\n\n| loss | acc |\n|---|---|\n| del | -40.8 [-52.2, -30.3] * |\n"
        "\n## Other\n\nx\n", encoding="utf-8")
    (tmp_path / "results" / "t" / "v.csv").write_text("loss,frac\nmle,0.97312\n", encoding="utf-8")
    return tmp_path


def _doc(body: str) -> str:
    return "<!-- numbers-from: results/t -->\n" + body


def test_numbers_must_be_values_of_the_named_files(root):
    assert check_text(_doc("DEL is -40.8 [-52.2, -30.3] points below MLE.\n"), root) == []
    assert check_text(_doc("MLE's digit accuracy 97.3 % (0.973 as a fraction).\n"), root) == []
    (p,) = check_text(_doc("MLE's digit accuracy 97.4 %.\n"), root)
    assert "97.4" in p.message and p.line == 2
    bad = check_text(_doc("DEL is -40.8 [-52.2, -30.4] points below MLE.\n"), root)  # a hand-copy typo
    assert any("not written in the tables" in p.message for p in bad)
    # a unit between the estimate and its interval: checked as the cell without it, so a wrong estimate
    # that happens to round to some other value of the files is still caught
    (tmp := root / "results" / "t" / "w.md").write_text("| x | 9.0 [8.7, 9.3] |\n| y | 9.1 |\n", encoding="utf-8")
    assert check_text(_doc("lowers it at 9.0 % [8.7, 9.3] of positions\n"), root) == []
    bad = check_text(_doc("lowers it at 9.1 % [8.7, 9.3] of positions\n"), root)
    assert [p.message for p in bad] == ["'9.1 % [8.7, 9.3]' is not written in the tables of results/t"]
    tmp.unlink()
    assert check_text(_doc("Qwen2.5-1.5B, `0.123` in code, [link](x/1.23.md)\n"), root) == []


def test_a_region_ends_at_its_closing_marker(root):
    text = _doc("acc 97.3\n<!-- /numbers-from -->\nlr 5.5e-6 and version 5.19\n")
    assert check_text(text, root) == []
    assert len(check_text(text.replace("<!-- /numbers-from -->\n", ""), root)) == 2  # 5.5 and 5.19


def test_include_blocks_are_synced_and_checked(root):
    text = "Intro\n<!-- include: results/t/table.md#Main -->\nstale\n<!-- /include -->\nEnd\n"
    (p,) = check_text(text, root)
    assert "differs from the file" in p.message
    synced = sync_text(text, root)
    assert "| del | -40.8 [-52.2, -30.3] * |" in synced and "stale" not in synced and "## Other" not in synced
    assert check_text(synced, root) == []
    (p,) = check_text(text.replace("#Main", "#Nope"), root)
    assert "no section 'Nope'" in p.message and "Main" in p.message


def test_included_links_point_from_the_document(root):
    (root / "results" / "t" / "plot.md").write_text("## Fig\n\n![p](p.png) [up](../u.md) [web](https://x.org/a)\n")
    out = sync_text("<!-- include: results/t/plot.md#Fig -->\n<!-- /include -->\n", root, "docs")
    assert "![p](../results/t/p.png) [up](../results/u.md) [web](https://x.org/a)" in out


def test_section_of_the_whole_file_drops_the_generated_header(root):
    whole = section((root / "results" / "t" / "table.md").read_text(), "")
    assert whole.startswith("## Main") and "git: abc" not in whole
