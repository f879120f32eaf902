"""tools/results_diff.py, `make tables-check`'s comparison (issue 58's CI failure: a CSV number that moved in its
16th digit on another CPU failed a byte diff): hand-built texts whose verdicts can be checked by eye."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("results_diff", REPO / "tools" / "results_diff.py")
rd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rd)


def test_a_csv_number_may_move_in_its_last_digits_only():
    old = "loss,lo,p\ndel,-0.13048539325308706,0.0099\n"
    assert rd.csv_differences(old, "loss,lo,p\ndel,-0.13048539325308708,0.0099\n", "r.csv") == []  # 1.5e-16 rel
    moved = rd.csv_differences(old, "loss,lo,p\ndel,-0.1304854,0.0099\n", "r.csv")  # 4.4e-8 relative
    assert moved == ["r.csv:2: cell 2 is '-0.1304854', the commit has '-0.13048539325308706'"]
    assert rd.csv_differences(old, "loss,lo,p\nmle,-0.13048539325308706,0.0099\n", "r.csv")  # a label is text
    assert rd.csv_differences(old, "loss,lo,p\ndel,-0.13048539325308706,0.0099\nx,1,2\n", "r.csv")  # a row more


def test_nan_zero_and_text_cells():
    assert rd.cells_agree("nan", "nan") and rd.cells_agree("", "")
    assert not rd.cells_agree("nan", "0.0") and not rd.cells_agree("inf", "1e308")
    assert rd.cells_agree("0.0", "1e-13") and not rd.cells_agree("0.0", "1e-11")  # ATOL near zero
    assert not rd.cells_agree("True", "False") and not rd.cells_agree("3/5", "3/6")


def test_markdown_is_strict_but_for_the_header_lines():
    old = "# T\n- date: 2026-12-01\n- git: abc\n- machine: x\n| a | 0.1235 |\n"
    new = "# T\n- date: 2026-12-07\n- git: def\n- machine: y\n| a | 0.1235 |\n"
    assert rd.file_differences(old, new, "t.md") == []
    assert rd.file_differences(old, new.replace("0.1235", "0.1234"), "t.md") == [
        "t.md:5: '| a | 0.1234 |', the commit has '| a | 0.1235 |'"]
    assert rd.file_differences(old, new.replace("- git: def", "- gitx: def"), "t.md")  # not a header line


def test_main_against_a_repository(tmp_path, monkeypatch, capsys):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.csv").write_text("x,y\n1,0.30000000000000004\n")
    (tmp_path / "results" / "b.md").write_text("- git: a\n| 1 |\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run([*git, *cmd], cwd=tmp_path, check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "a.csv").write_text("x,y\n1,0.3\n")
    (tmp_path / "results" / "b.md").write_text("- git: b\n| 1 |\n")
    assert rd.main(["results"]) == 0
    (tmp_path / "results" / "new.md").write_text("x\n")
    assert rd.main(["results"]) == 1
    assert "results/new.md: not in git" in capsys.readouterr().out
    (tmp_path / "results" / "new.md").unlink()
    (tmp_path / "results" / "b.md").unlink()
    assert rd.main(["results"]) == 1
    assert "results/b.md: deleted" in capsys.readouterr().out
