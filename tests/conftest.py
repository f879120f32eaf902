"""Shared fixtures. Tests run with one torch thread (two busy processes on two cores slow each
other badly) and never touch the network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)

try:  # the config schema (Hydra structured configs) for the tests that compose conf/ themselves, and the
    # repo's benchmarks by name (extract_answer("gsm8k", ...)), registered as the entry points do
    from numlearn.cli import benchmark_configs as _benchmark_configs
    from numlearn.evaluation.spec import register_benchmarks as _register_benchmarks
    from numlearn.schema import register as _register_schema

    _register_schema()
    _register_benchmarks(_benchmark_configs())
except ImportError:  # the core tier's bare venv has no hydra-core
    pass

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NUMLEARN_SHARED_DIR", REPO.parent / "shared"))
# The repo's own data root (`make data`) first; a local copy beside the clone otherwise.
DATA_DIR = Path(os.environ.get("NUMLEARN_DATA_DIR") or
                (REPO / "data" if (REPO / "data" / "benchmarks").is_dir() else SHARED / "data"))
# ./assets once `make assets` has built (or copied from a mirror) every tokenizer the tests read there; a copy
# beside the clone otherwise (an ./assets an older `make assets` left half-filled does not shadow it)
_TESTED_TOKENIZERS = ("qwen2.5", "deepseek-llm", "llama2-spm", "mistral-v1", "smollm2")
TOKENIZERS = Path(os.environ.get("NUMLEARN_ASSETS_DIR") or
                  (SHARED / "assets" if not all((REPO / "assets" / "tokenizers" / t).is_dir() for t in _TESTED_TOKENIZERS)
                   and (SHARED / "assets" / "tokenizers").is_dir() else REPO / "assets")) / "tokenizers"


def _need(path: Path, what: str):
    if not path.exists():
        fix = "`make data` (the benchmark files)" if "data" in what else "`make assets` (the offline tokenizers)"
        pytest.skip(f"{what} not found: run {fix}, or point NUMLEARN_DATA_DIR / NUMLEARN_ASSETS_DIR at a copy")
    return path


# -- hermetic: nothing a test does lands in the checkout's outputs/ or results/ ------------------------
# Every run dir a test's composed config or subprocess names goes to a temporary output root (the config's
# paths.output_dir reads NUMLEARN_OUTPUT_DIR), and the session fails if the checkout's results/ (tracked or
# not) or outputs/ changed while it ran: a user's runs and the committed evidence are never a test's fixture.
_OUTPUT_ROOT = Path(__import__("tempfile").mkdtemp(prefix="numlearn-test-outputs-"))
os.environ["NUMLEARN_OUTPUT_DIR"] = str(_OUTPUT_ROOT)


def _checkout_state() -> dict | None:
    import shutil
    import subprocess

    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return None
    r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "results"], cwd=REPO,
                       capture_output=True, text=True)
    outputs = REPO / "outputs"
    files = {str(f.relative_to(REPO)): f.stat().st_mtime_ns for f in outputs.rglob("*") if f.is_file()} \
        if outputs.is_dir() else {}
    return {"results": r.stdout if r.returncode == 0 else None, "outputs": files}


def pytest_sessionstart(session):
    session.config._numlearn_checkout = _checkout_state()


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_numlearn_checkout", None)
    after = _checkout_state()
    if before is None or after is None:
        return
    changed = sorted({*after["results"].splitlines()} - {*before["results"].splitlines()}) \
        if before["results"] is not None and after["results"] is not None else []
    changed += sorted(k for k in {*before["outputs"], *after["outputs"]}
                      if before["outputs"].get(k) != after["outputs"].get(k))
    if changed:
        print(f"\nnumlearn tests: the session changed the checkout's results/ or outputs/ ({len(changed)}: "
              f"{', '.join(changed[:5])}): a test must write to a temporary directory", flush=True)
        session.exitstatus = 1


@pytest.fixture(scope="session")
def shared_tokenizers() -> Path:
    return _need(TOKENIZERS, "shared tokenizers")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return _need(DATA_DIR / "benchmarks", "shared benchmark data").parent


def _built_tokenizer(name: str, build):
    """assets/tokenizers/<name> (make assets), or built here from the llama-cpp-python sdist on PyPI (the package
    registry is reachable in CI) with ``build`` (numlearn.assets); skipped with the reason otherwise."""
    from transformers import AutoTokenizer

    path = TOKENIZERS / name
    if not (path / "tokenizer.json").exists():
        try:
            path = build(REPO / "data_cache" / f"{name}-tokenizer", REPO / "data_cache")
        except Exception as e:  # noqa: BLE001 - no registry, no sdist: say why
            pytest.skip(f"{name} tokenizer not built ({type(e).__name__}: {e}): run `make assets`")
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """Qwen2.5's tokenizer (numlearn.assets.qwen25_tokenizer where ./assets lacks it)."""
    from numlearn.assets import qwen25_tokenizer

    return _built_tokenizer("qwen2.5", qwen25_tokenizer)


@pytest.fixture(scope="session")
def char_tokenizer():
    """A locally built tokenizer, one token per character: "0".."9" are ids 0..9, "." is 10."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list("0123456789.") + list("abcdefghijklmnopqrstuvwxyz ,=+-*$") + ["\n"]
    vocab = {c: i for i, c in enumerate(chars)}
    vocab["<eos>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory):
    """The embedded default tokenizer, fitted to a small synthetic corpus."""
    from numlearn.data.prompts import format_prompt
    from numlearn.data.sources import synthetic_records
    from numlearn.data.tokenizer import cached_tokenizer

    cache = tmp_path_factory.mktemp("cache")
    recs = synthetic_records(cache, 400, seed=0)
    return cached_tokenizer([format_prompt(r["instruction"]) + r["output"] for r in recs], cache, 400)


@pytest.fixture(scope="session")
def llama3_tokenizer():
    """Llama-3's tokenizer (numlearn.assets.llama3_tokenizer where ./assets lacks it)."""
    from numlearn.assets import llama3_tokenizer

    return _built_tokenizer("llama3", llama3_tokenizer)


class _SpaceyNumberTokenizer:
    """Numbers come out as " 12"-style tokens (a leading space): neither single digits nor pure
    number tokens, so every digit-level loss must refuse it."""

    name_or_path = "spacey"
    unk_token_id = None
    vocab = {" 12": 0, "3": 1, "x": 2, " ": 3, ".": 4, "5": 5}

    def __len__(self):
        return len(self.vocab)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab[" 12"]] * 2}

    def convert_tokens_to_ids(self, t):
        return self.vocab.get(t)

    def decode(self, ids, **kw):
        inv = {v: k for k, v in self.vocab.items()}
        return "".join(inv[i] for i in ids)


@pytest.fixture
def spacey_number_tokenizer():
    return _SpaceyNumberTokenizer()


@pytest.fixture(scope="module")
def saved_tiny_model(tmp_path_factory, tiny_tokenizer):
    """A config-built 2-layer Qwen2 with the tiny tokenizer, saved to a directory (evaluation tests)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = tmp_path_factory.mktemp("tiny_model")
    cfg = AutoConfig.for_model("qwen2", vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                               max_position_embeddings=512, eos_token_id=tiny_tokenizer.eos_token_id,
                               pad_token_id=tiny_tokenizer.pad_token_id)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


class CliResult:
    """What a command-line run left: ``returncode``, ``stdout``, ``stderr`` (the exit message included, as the
    interpreter prints it), and ``lines``: stderr's non-blank lines."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run an entry point in-process: ``cli("numlearn.train", ["loss=nope"], env={...})`` behaves as
    ``python -m numlearn.train loss=nope`` does (exit status, stdout, stderr with the exit message), without
    a new interpreter. One subprocess test per entry point keeps ``-m`` itself covered."""
    import importlib
    import sys

    def run(module: str, argv: list[str], env: dict | None = None) -> CliResult:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        main = importlib.import_module(module).main
        capsys.readouterr()
        code: object = 0
        try:
            ret = main(list(argv))
            code = ret if isinstance(ret, int) else 0
        except SystemExit as e:
            code = e.code
        finally:
            try:
                from hydra.core.global_hydra import GlobalHydra

                GlobalHydra.instance().clear()
            except ImportError:
                pass
        out = capsys.readouterr()
        err = out.err
        if isinstance(code, str):
            err, code = err + code + "\n", 1
        return CliResult(int(code or 0), out.out, err)

    del sys  # the fixture's own import; kept local so a bare test module does not pay for it
    return run
