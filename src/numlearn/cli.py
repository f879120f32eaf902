"""Shared helpers of the Hydra entry points: where ``conf/`` is, and one-line errors for the
mistakes users make most (an unknown config choice, a missing data root)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _conf_candidate() -> Path:
    return Path(os.environ.get("NUMLEARN_CONF_DIR", REPO_ROOT / "conf"))


class _Stderr(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when a record is emitted (a test's capture, a redirected stream)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure_logging(level: int = logging.INFO) -> None:
    """The argparse entry points' logging (the Hydra ones get Hydra's): numlearn's messages on stderr, one line
    each, ``<module>: <message>``. Library code only logs; this is the one place its output is configured."""
    root = logging.getLogger("numlearn")
    root.setLevel(level)
    if not any(isinstance(h, _Stderr) for h in root.handlers):
        h = _Stderr()
        h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(h)


def find_conf_dir() -> Path | None:
    """``conf/`` (or ``NUMLEARN_CONF_DIR``) where it holds the config tree, else None (a wheel install): for library
    code, which raises its own error instead of exiting."""
    d = _conf_candidate()
    return d if (d / "config.yaml").exists() else None


def conf_dir() -> str:
    """``conf/`` (or ``NUMLEARN_CONF_DIR``), with the config schema registered (``numlearn.schema``); the
    entry points' view: a missing tree ends the command with one line."""
    from numlearn.schema import register

    register()
    d = find_conf_dir()
    if d is None:
        sys.exit(f"error: Hydra config directory {_conf_candidate()} not found; run from a clone of numlearn "
                 "(pip install -e .) or set NUMLEARN_CONF_DIR")
    return str(d)


def preset_config(experiment: str, overrides: tuple[str, ...] | list[str] = (), config: str = "evaluate"):
    """The composed ``config`` (``evaluate`` or ``config``, the training one) for ``experiment=<experiment>`` plus
    ``overrides``; composing only -- nothing is generated or read. For the pipeline and scripts that need a preset's
    settings (``data.n_train``, ``eval.teacher_forced``) without running it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
        return compose(config, overrides=[f"experiment={experiment}", *overrides])


def benchmark_configs(conf: str | Path | None = None) -> list:
    """The typed ``BenchmarkConfig`` of every ``conf/eval/benchmark/*.yaml`` (``conf``: the config tree, default
    ``conf_dir()``), for ``numlearn.evaluation.spec.register_benchmarks``: the CLI layer reads the tree, the
    library takes the configs. A misspelt key in any file is a ``ValueError`` naming the file and the key."""
    from numlearn.schema import load_benchmark_config

    folder = Path(conf if conf is not None else conf_dir()) / "eval" / "benchmark"
    return [load_benchmark_config(p) for p in sorted(folder.glob("*.yaml"))]


def cluster_config(name_or_file: str):
    """The typed ``ClusterConfig`` of ``conf/cluster/<name>.yaml`` or of a file; an unknown name is one line naming
    the choices."""
    from numlearn.schema import load_cluster_config

    path = Path(name_or_file)
    if not path.is_file():
        folder = Path(conf_dir()) / "cluster"
        path = folder / f"{name_or_file}.yaml"
        if not path.is_file():
            names = sorted(p.stem for p in folder.glob("*.yaml"))
            raise ValueError(f"--cluster {name_or_file}: neither a file nor one of conf/cluster/ {names}; copy "
                             "conf/cluster/default.yaml to conf/cluster/<site>.yaml and fill it in")
    return load_cluster_config(path)


def schema_fields(group: str) -> set[str]:
    """The keys the config schema (``numlearn.schema``) types for ``group`` (empty: no schema)."""
    from dataclasses import fields

    from numlearn.schema import SCHEMAS

    return {f.name for (g, _), node in SCHEMAS.items() if g == group for f in fields(node)}


def _check_typed_override(arg: str, prog: str) -> None:
    """``train.max_steps=ten``: exit with one line naming the key, the value and the schema's type,
    before Hydra composes (whose own report is a multi-line trace)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from numlearn.schema import SCHEMAS

    key, value = arg.lstrip("+").split("=", 1)
    group, _, name = key.partition(".")
    node = next((n for (g, _), n in SCHEMAS.items() if g == group), None)
    if node is None or not name or "." in name or name not in schema_fields(group):
        return
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_override(arg.lstrip("+"))
        v = parsed.value()
    except Exception:  # noqa: BLE001 - a sweep or grammar Hydra reports itself
        return
    if not isinstance(v, (str, int, float, bool)) or (isinstance(v, str) and "${" in v) or parsed.is_sweep_override():
        return
    try:
        OmegaConf.merge(OmegaConf.structured(node), {name: v})
    except OmegaConfBaseException as e:
        want = node.__dataclass_fields__[name].type
        want = want.__name__ if isinstance(want, type) else str(want).replace("typing.", "")
        sys.exit(f"{prog}: error: {key}={v!r}: the schema types {key} as {want} "
                 f"(numlearn.schema.{node.__name__}; {str(e).splitlines()[0]})")


def override_range_problem(arg: str) -> str | None:
    """``key=value`` (a Hydra override, a sweep's ``key=a,b,c`` included) whose value lies outside the range the
    schema gives ``key`` (``numlearn.schema.Range``): ``key=value: must be ...``; None otherwise, and for a key
    the schema does not range or a value Hydra must resolve first (an interpolation)."""
    from numlearn.schema import ROOT_RANGES, SCHEMAS

    if "=" not in arg or arg.startswith("-"):
        return None
    key, _ = arg.lstrip("+~").split("=", 1)
    group, _, name = key.partition(".")
    if not name and group in ROOT_RANGES:
        rng, nullable = ROOT_RANGES[group], False
    else:
        node = next((n for (g, _), n in SCHEMAS.items() if g == group), None)
        f = node.__dataclass_fields__.get(name) if node is not None and "." not in name else None
        if f is None or (rng := f.metadata.get("range")) is None:
            return None
        nullable = "Optional" in str(f.type) or str(f.type) == "typing.Any"
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_override(arg.lstrip("+~"))
        values = list(parsed.sweep_string_iterator()) if parsed.is_sweep_override() else [parsed.value()]
        if parsed.is_sweep_override():
            values = [OverridesParser.create().parse_override(f"{key}={v}").value() for v in values]
    except Exception:  # noqa: BLE001 - a grammar Hydra reports itself
        return None
    for v in values:
        if isinstance(v, str) and "${" in v:
            continue
        if (why := rng.problem(v, nullable)) is not None:
            return f"{key}={v!r}: must be {why}"
    return None


def offline_if_hub_unreachable(prog: str, timeout_s: float = 3.0) -> bool:
    """Without ``HF_HUB_OFFLINE`` set, a hub name on a machine with no network spends about a minute in
    Hugging Face's retries before the one-line error (the README's commands, run outside ``make``). The
    same name lookup those retries begin with, done once here with a time limit: when the hub's host
    does not resolve, the run goes offline (``HF_HUB_OFFLINE=1``, said in one line) and local files,
    caches and the offline-twin hints answer at once. True when it switched."""
    import socket
    import threading
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE") not in (None, ""):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    found: list[bool] = []

    def look() -> None:
        try:
            socket.getaddrinfo(host, 443)
            found.append(True)
        except OSError:
            found.append(False)

    t = threading.Thread(target=look, daemon=True)
    t.start()
    t.join(timeout_s)
    if found and found[0]:
        return False
    os.environ["HF_HUB_OFFLINE"] = "1"
    print(f"[{prog}] the Hugging Face hub ({host}) does not resolve: running offline (HF_HUB_OFFLINE=1); set "
          "HF_HUB_OFFLINE=0 to try it anyway", file=sys.stderr, flush=True)
    return True


@contextlib.contextmanager
def hydra_argv(prog: str, argv: list[str] | None):
    """``sys.argv`` for a Hydra entry point: ``[prog, *argv]`` while it runs (restored after), or the process's
    own when ``argv`` is None. So ``numlearn.train.main(["loss=del"])`` runs in-process as
    ``python -m numlearn.train loss=del`` does (tests of one-line errors need no new interpreter)."""
    # hydra.main read conf_dir() when the entry point was imported: the tree as of now goes first (NUMLEARN_CONF_DIR
    # set or unset since, in-process calls with another tree before this one)
    extra = []
    d = os.environ.get("NUMLEARN_CONF_DIR") or (str(_conf_candidate()) if argv is not None else None)
    if d and not {"--config-dir", "--config-path", "-cp"} & set(argv or sys.argv):
        extra = ["--config-path", d]  # replaces the path hydra.main was given (--config-dir only adds one after it)
    if argv is None:
        sys.argv += extra
        yield sys.argv
        return
    saved = sys.argv
    sys.argv = [prog, *argv, *extra]
    try:
        yield sys.argv
    finally:
        sys.argv = saved


def run_entry_point(prog: str, config_name: str, hydra_main, argv: list[str] | None) -> None:
    """A Hydra entry point's checks, then the app: ``sys.argv`` (or ``argv``, in-process) checked for unknown
    group choices, an unwritable output and config files that fail their schema -- each one line -- the hub
    reached or offline, then ``hydra_main()``."""
    with hydra_argv(prog, argv) as args:
        check_group_overrides(args, prog)
        check_output_writable(args, prog)
        check_composes(args, config_name, prog)
        offline_if_hub_unreachable(prog)
        hydra_main()


def check_group_overrides(argv: list[str], prog: str) -> None:
    """Exit with one line naming the valid choices when ``group=value`` names no config file, and
    naming the type when a schema-typed key gets a value of another type."""
    root = Path(conf_dir())
    for arg in argv[1:]:
        if arg.startswith("-") or "=" not in arg:
            continue
        _check_typed_override(arg, prog)
        if (problem := override_range_problem(arg)) is not None:  # a sweep's values too (-m: no compose check)
            from numlearn.schema import range_refusal

            sys.exit(f"{prog}: error: {range_refusal([problem])}")
        key, value = arg.split("=", 1)
        if key.startswith("+") and not key.startswith("++") and "." in key:
            _check_added_key(root, key.lstrip("+"), prog)
        elif "." in key and not key.startswith(("+", "~", "hydra.")):  # a misspelt key: one line, not Hydra's 7
            _check_added_key(root, key, prog, added=False)
        key = key.lstrip("+~")
        gdir = root / key
        if not gdir.is_dir() or not value or value == "null":
            continue
        choices = sorted(p.stem for p in gdir.glob("*.yaml"))
        for v in value.split(","):
            if v not in choices:
                sys.exit(f"{prog}: error: unknown {key} {v!r}; choose one of: {', '.join(choices)}")


def check_composes(argv: list[str], config_name: str, prog: str) -> None:
    """Compose the config the command will run (not a multirun: Hydra composes each job itself) and exit
    with one line when a config file fails its schema -- a misspelt or unknown key in a YAML file, a value of
    the wrong type -- naming the file, the key and the schema (Hydra's own report is a trace), or when a value
    lies outside its schema's range (``numlearn.schema.range_problems``: a NaN weight, a negative batch size, a
    fractional seed). Other composition errors are left to Hydra."""
    if any(a in ("-m", "--multirun") for a in argv[1:]):
        return
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    overrides = [a for a in argv[1:] if not a.startswith("-") and "=" in a
                 and not a.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(version_base="1.3", config_dir=conf_dir()):
            cfg = compose(config_name, overrides=overrides)
    except ConfigCompositionException as e:
        cause = e.__cause__ or e.__context__
        if cause is None or type(cause).__name__ not in ("ConfigKeyError", "ValidationError", "KeyValidationError"):
            return
        import re

        m = re.match(r"In '([^']+)'", str(e).strip())  # "In 'eval/benchmark/svamp': ConfigKeyError raised ..."
        where = f"conf/{m.group(1)}.yaml" if m else "a config file"
        what = str(cause).strip().splitlines()
        full = next((ln.split(":", 1)[1].strip() for ln in what if ln.strip().startswith("full_key:")), "")
        sys.exit(f"{prog}: error: {where}: {what[0]}"
                 f"{f' ({full})' if full else ''}: fix the key or value there (its schema: numlearn.schema)")
    except Exception:  # noqa: BLE001 - anything else (a bad override's grammar, a missing file): Hydra says it
        return
    from numlearn.schema import range_problems, range_refusal

    target = cfg.get("eval_dir") if config_name == "evaluate" else cfg.get("run_dir")
    if target is not None and (why := uncreatable(str(target))) is not None:
        key = "eval_dir" if config_name == "evaluate" else "run_dir"
        sys.exit(f"{prog}: error: cannot create the {key.replace('_', ' ')} {target}: {why}; point paths.output_dir "
                 f"(or {key}) at a writable directory")
    if problems := range_problems(cfg):  # a value outside its schema's range: refused before anything is written
        sys.exit(f"{prog}: error: {range_refusal(problems)}")


_IO_ERRNOS = {28: "no space left on the device", 122: "disk quota exceeded", 30: "a read-only file system",
              13: "permission denied"}
_IO_TEXTS = {"No space left on device": 28, "os error 28": 28, "Read-only file system": 30, "os error 30": 30,
             "Disk quota exceeded": 122}


_TORCH_WRITER = ("inline_container.cc", "PytorchStreamWriter", "unexpected pos")


def _existing(path) -> Path:
    """``path`` (absolute), or its nearest existing parent: where a not-yet-created output would go."""
    p = Path(str(path)).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _full(path) -> bool:
    """The filesystem holding ``path`` (or its nearest existing parent) has under 4 MB free."""
    try:
        st = os.statvfs(_existing(path))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (4 << 20)


def io_failure(err: BaseException, output: str | Path | None = None) -> str | None:
    """One line for an exception that is the output's storage failing (full disk, quota, read-only or
    unwritable output dir) -- raised as ``OSError`` by Python, or as text by safetensors' and torch's
    writers (torch's checked against the free space of ``output``) -- and None for anything else. What was written before stays incomplete: a run dir without
    its final weights, or a generations file whose last line is cut, is resumed, never taken as done."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        code = err.errno if isinstance(err, OSError) and err.errno in _IO_ERRNOS else None
        code = code or next((c for t, c in _IO_TEXTS.items() if t in str(err)), None)
        # torch.save on a full disk says neither ENOSPC nor "no space" ("[enforce fail at inline_container.cc]
        # unexpected pos ..."): where the output's filesystem is full, that is what it was
        if code is None and output is not None and any(t in str(err) for t in _TORCH_WRITER) and _full(output):
            code = 28
        if code is not None:
            where = f" ({err.filename})" if isinstance(err, OSError) and err.filename else ""
            fix = ("free space there or point paths.output_dir elsewhere" if code in (28, 122) else
                   "make it writable or point paths.output_dir at a writable directory")
            return (f"cannot write the output{where}: {_IO_ERRNOS[code]}; {fix}, then re-run the same command "
                    "(it resumes; nothing half-written is taken as complete)")
        err = err.__cause__ or err.__context__
    return None


def check_output_writable(argv: list[str], prog: str) -> None:
    """Before Hydra creates the run dir (its own failure is a traceback): the output root given by
    ``paths.output_dir=`` (or ``NUMLEARN_OUTPUT_DIR``, or ./outputs), or its nearest existing parent, must
    be writable; one line otherwise."""
    out = os.environ.get("NUMLEARN_OUTPUT_DIR") or "outputs"
    for arg in argv[1:]:
        if arg.lstrip("+").startswith("paths.output_dir="):
            out = arg.split("=", 1)[1]
    if "${" in out or "," in out:
        return
    p = _existing(out)
    if not os.access(p, os.W_OK):
        why = "a read-only file system" if _read_only(p) else "not writable by this user"
        sys.exit(f"{prog}: error: cannot write the output under {p}: {why}; make it writable or pass "
                 "paths.output_dir=<a writable directory>")


def uncreatable(path: str) -> str | None:
    """Why the directory ``path`` cannot be created (a file in the way, ``/dev/null/x``, a pseudo-filesystem
    such as ``/proc``, no permission), or None when it exists or can be. Probed with a uniquely named directory
    made and removed in its nearest existing ancestor: nothing is left behind, and the ranks of one launch,
    which all run this check at once, never touch each other's probe."""
    import tempfile

    p = Path(path).expanduser().absolute()
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    if p.exists():
        return None if p.is_dir() else f"{p} is not a directory"
    if not q.is_dir():
        return f"{q} is not a directory"
    try:
        probe = tempfile.mkdtemp(prefix=".numlearn-probe-", dir=q)
    except OSError as e:
        return e.strerror or str(e)
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return None


def _read_only(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def fail(prog: str, err: Exception, run_dir=None, output_root=None) -> None:
    if run_dir is not None:
        remove_if_junk(run_dir, output_root)
    sys.exit(f"{prog}: error: {err}")


def remove_if_junk(run_dir, stop_at=None) -> None:
    """After a failure before any work: remove the run dir Hydra created for it (``.hydra/``, a
    ``train.log`` / ``evaluate.log``, ``eval/.hydra/``) and its then-empty parents below
    ``stop_at``, so bad input leaves nothing behind. A dir holding anything else is kept."""
    import shutil

    d = Path(str(run_dir))
    if not d.is_dir():
        return
    names = {p.name for p in d.iterdir()}
    if not names <= {".hydra", "train.log", "evaluate.log", "eval"}:
        return
    if "eval" in names and {p.name for p in (d / "eval").iterdir()} - {".hydra"}:
        return
    shutil.rmtree(d, ignore_errors=True)
    stop = Path(str(stop_at)).resolve() if stop_at is not None else None
    for parent in d.resolve().parents:
        if stop is not None and (parent == stop or stop not in parent.parents):
            break
        try:
            parent.rmdir()  # only while empty
        except OSError:
            break


def require_extra(modules: tuple[str, ...], extra: str, prog: str) -> None:
    """Exit with one line naming the extra to install when a reproduction dependency is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"{prog}: error: {', '.join(missing)} not installed: {prog} needs the [{extra}] extra "
                 f"(pip install 'numlearn[{extra}]', or `make setup` in a clone for the pinned set)")


def _check_added_key(root: Path, dotted: str, prog: str, added: bool = True) -> None:
    """``+train.max_stepz=3`` adds a key no code reads: exit with one line (and the nearest known key)
    when ``group.key`` names a config group whose files define no such key. ``++`` forces it. Without the
    ``+`` (``added=False``: ``train.max_stpes=10``, which Hydra refuses in seven lines) the same one line."""
    import difflib

    from omegaconf import OmegaConf

    group, _, rest = dotted.partition(".")
    gdir = root / group
    if not gdir.is_dir() or not rest:
        return
    known = set()
    for f in gdir.glob("*.yaml"):
        node = OmegaConf.load(f)
        if hasattr(node, "keys"):
            known.update(str(k) for k in node.keys())
    known.update(p.name for p in gdir.iterdir() if p.is_dir())  # nested groups (eval/benchmark)
    known.update(schema_fields(group))
    first = rest.split(".", 1)[0]
    if first not in known:
        near = difflib.get_close_matches(first, sorted(known), n=1)
        if not added:
            sys.exit(f"{prog}: error: {dotted}: no {group} config defines {first!r}"
                     + (f"; did you mean {group}.{near[0]}?" if near else "")
                     + f" (+{dotted}=... adds a new key)")
        sys.exit(f"{prog}: error: +{dotted}: no {group} config defines {first!r}, so nothing would read it"
                 + (f"; did you mean {group}.{near[0]}?" if near else "")
                 + " (++ adds it anyway)")
