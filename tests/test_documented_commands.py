"""Every command the README and docs/ show parses as written (issue 66 item 4: `docs/method.md` once showed
`python -m numlearn.assets llama3-tokenizer` without its required `--out`).

Commands are read from code (fenced blocks and inline code spans): ``python -m numlearn.<module> ...`` and
``make <target> ...``. A placeholder is given a value (``<experiment>`` -> ``1``), an optional part in brackets
is dropped (a placeholder in capitals too: ``seed=S`` -> ``seed=1``, a bare ``OVERRIDES`` left out), a command that
elides its arguments (``...``) or names a module alone is a reference, not a command.
Then, without running anything:

* a Hydra entry point (``numlearn.train``, ``numlearn.evaluate``) composes its config with the overrides as
  written (each value of a ``-m`` sweep);
* an argparse entry point parses its arguments (the module's own parser, stopped right after parsing);
* ``numlearn.probe`` reads its ``key=value`` arguments (``ProbeConfig.from_args``);
* a make target exists in the Makefile, and each ``VAR=value`` it is given is a variable the Makefile reads.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`]+)`")  # a span may wrap onto the next line
COMMAND = re.compile(r"(?:^|\s|\$ )((?:\.venv/bin/)?python -m numlearn[\w.]*(?: [^\n#|;&]*)?|make [a-z][\w-]*(?: [^\n#|;&)]*)?)")
HYDRA = {"numlearn.train": "config", "numlearn.evaluate": "evaluate"}
# docs/extending.md's walk-through: these name the files the reader has just been shown how to write
READERS_FILES = ("loss=toy", "model=toy_tiny", "+eval/benchmark@eval.benchmarks.toy=toy")


def _code(text: str) -> list[str]:
    """The code of a Markdown document: each line of a fenced block, each inline code span."""
    out = [ln for block in FENCE.findall(text) for ln in block.splitlines()]
    return out + [re.sub(r"\s+", " ", span) for span in INLINE.findall(FENCE.sub("", text))]


def _clean(cmd: str) -> str | None:
    """The command with its placeholders filled and optional parts dropped; None for a reference."""
    cmd = re.sub(r"\s+#.*$", "", cmd).strip().rstrip(".,:")
    if "..." in cmd or "…" in cmd:
        return None
    cmd = re.sub(r" \[[^\]]*\]", "", cmd)  # [SEEDS=8] [--plan]
    cmd = re.sub(r"<[^>]+>", "1", cmd)
    if cmd.startswith(("python", ".venv")):  # placeholders in capitals: seed=S, train.max_steps=N, a bare OVERRIDES
        words = cmd.split()
        cmd = " ".join(("1" if words[i - 1].startswith("--") else "") if re.fullmatch(r"[A-Z]{3,}", w)
                       else re.sub(r"=([A-Z]|[A-Z][A-Z_]+)$", "=1", w) for i, w in enumerate(words)).strip()
        cmd = re.sub(r"/[A-Z]{3,}\b", "/1", re.sub(r"\s+", " ", cmd))
    return cmd if len(cmd.split()) > (3 if cmd.startswith(("python", ".venv")) else 1) or cmd.startswith("make") \
        else None


def documented_commands() -> list[tuple[str, str]]:
    found = {}
    for doc in DOCS:
        for line in _code(doc.read_text(encoding="utf-8")):
            for m in COMMAND.finditer(line):
                if (cmd := _clean(m.group(1))) is not None:
                    found.setdefault(cmd, doc.relative_to(REPO).as_posix())
    return sorted((doc, cmd) for cmd, doc in found.items())


COMMANDS = documented_commands()


def _makefile() -> tuple[set[str], set[str]]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", text, re.M))
    variables = set(re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", text)) | set(re.findall(r"^([A-Z_][A-Z0-9_]*) \??=", text, re.M))
    return targets, variables


class _Parsed(Exception):
    pass


def _parses(module: str, argv: list[str], monkeypatch) -> None:
    """Run ``module.main(argv)`` up to its argument parsing: a parse error fails the test (SystemExit 2)."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    mod = importlib.import_module(module)
    with pytest.raises(_Parsed):
        mod.main(argv)


def _composes(config: str, argv: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from numlearn.cli import conf_dir

    overrides = [a for a in argv if a not in ("-m", "--multirun")]
    sweeps = [o for o in overrides if "," in o.split("=", 1)[-1] and not o.split("=", 1)[-1].startswith("[")]
    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        for value in (sweeps[0].split("=", 1)[1].split(",") if sweeps else [None]):
            given = [o if o not in sweeps[:1] else f"{o.split('=', 1)[0]}={value}" for o in overrides]
            compose(config, overrides=given)


def test_the_docs_show_commands_of_every_kind():
    kinds = {c.split()[2] if c.startswith(("python", ".venv")) else "make" for _, c in COMMANDS}
    assert {"make", "numlearn.train", "numlearn.evaluate", "numlearn.pipeline"} <= kinds and len(COMMANDS) > 60


@pytest.mark.parametrize("doc,cmd", COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_documented_command_parses_as_written(doc, cmd, monkeypatch):
    words = shlex.split(cmd)
    if words[0] == "make":
        targets, variables = _makefile()
        assert words[1] in targets, f"{doc}: `{cmd}`: no target {words[1]!r} in the Makefile"
        unknown = [w.split("=")[0] for w in words[2:] if "=" in w and w.split("=")[0] not in variables]
        assert not unknown, f"{doc}: `{cmd}`: the Makefile reads no {unknown}"
        return
    module, argv = words[2], words[3:]
    if any(a in READERS_FILES for a in argv):
        pytest.skip(f"{doc}: `{cmd}` composes the files the guide has the reader write")
    try:
        if module in HYDRA:
            _composes(HYDRA[module], argv)
        elif module == "numlearn.probe":
            from numlearn.probe import ProbeConfig

            ProbeConfig.from_args(argv)
        else:
            _parses(module, argv, monkeypatch)
    except SystemExit as e:
        if e.code not in (0, None):  # --help exits 0
            pytest.fail(f"{doc}: `{cmd}` does not parse (exit {e.code})")
    except Exception as e:  # noqa: BLE001 -- a composition or config error, named with the doc
        pytest.fail(f"{doc}: `{cmd}`: {type(e).__name__}: {str(e).splitlines()[0]}")


def test_a_command_missing_a_required_argument_is_caught(monkeypatch):
    """The check goes red on the erratum that started it."""
    with pytest.raises(SystemExit):
        _parses("numlearn.assets", ["llama3-tokenizer"], monkeypatch)
    _parses("numlearn.assets", ["llama3-tokenizer", "--out", "x"], monkeypatch)  # parses, then stops
    assert _clean("make reproduce-table1 [SEEDS=8] [REUSE=1]") == "make reproduce-table1"
    assert _clean("python -m numlearn.train seed=S train.max_steps=N OVERRIDES") == \
        "python -m numlearn.train seed=1 train.max_steps=1"
    assert _clean("python -m numlearn.reporting.aggregate ... --protocol strict") is None
