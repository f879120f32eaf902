"""Run directories near the bottom of the house (imports only ``numlearn.records``, which holds the
run-dir paths and records): what a run dir holds (``run.json``, ``final/``), whether it is complete and its weights whole, and the training recipe
that decides the model a run ends with (what the store compares). Planning which runs to make, from
the configs and the store, is the orchestrator's: ``numlearn.pipeline`` (``runs``, ``pending``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from numlearn.records import FINAL, RUN_META, BadRecord, RunRecord  # noqa: F401 - the run-dir paths live there

# train.* keys that change what a run logs or saves, never the weights it ends with
BOOKKEEPING_TRAIN_KEYS = frozenset({"logging_steps", "save_steps", "save_total_limit", "disable_tqdm",
                                    "count_input_tokens", "ddp_timeout_s"})
# data.* keys that named what to measure after training, never what it trained on (data.heldout: the
# teacher-forced metrics' solutions, now eval.teacher_forced): older recipes still hold them
MEASUREMENT_DATA_KEYS = frozenset({"heldout"})


def training_recipe(cfg) -> dict:
    """What decides the model a run ends with: the resolved ``model``, ``data``, ``train`` (less
    bookkeeping) and ``loss`` sections and the seed. ``cfg``: a composed config or the ``config``
    dict a result file holds."""
    from omegaconf import DictConfig, OmegaConf

    c = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    train = {k: v for k, v in (c.get("train") or {}).items() if k not in BOOKKEEPING_TRAIN_KEYS}
    if not train.get("fsdp"):  # the sharding options act only under FSDP (they name the model's layer class)
        train.pop("fsdp_config", None)
    data = c.get("data")
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in MEASUREMENT_DATA_KEYS}
    # a null model or loss key is the schema's "not set" (the loss's own default, a source's unused key): left
    # out, so a recipe reads as the preset wrote it and a schema key added later changes no recipe
    model, loss = ({k: v for k, v in d.items() if v is not None} if isinstance(d, dict) else d
                   for d in (c.get("model"), c.get("loss")))
    return {"model": model, "data": data, "train": train, "loss": loss, "seed": c.get("seed")}


def recipe_sha(recipe: dict) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]


def recipe_differences(stored: dict, current: dict, prefix: str = "") -> list[str]:
    """``key: stored -> current`` for each leaf that differs. A key one side lacks while the other
    holds null or false is the same recipe: an option added later whose default leaves the old
    computation as it was."""
    out = []
    for k in sorted(set(stored) | set(current)):
        a, b = stored.get(k), current.get(k)
        name = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += recipe_differences(a, b, name + ".")
        elif (k not in stored and b in (None, False)) or (k not in current and a in (None, False)):
            continue
        elif a != b:
            out.append(f"{name}: {a!r} -> {b!r}")
    return out




def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_file_hashes(data_cfg, data_root: str | Path) -> dict[str, str]:
    """``{file as the config names it: sha256}`` for a local data source's files (``data.files``); empty for
    the other sources and for a file that is not there (loading it reports that)."""
    if str(data_cfg.get("source")) != "local":
        return {}
    out = {}
    for f in data_cfg.get("files") or []:
        p = Path(str(f)) if Path(str(f)).is_absolute() else Path(data_root) / str(f)
        if p.is_file():
            out[str(f)] = file_sha256(p)
    return out


def records_sha256(records: list[dict]) -> str:
    """One sha256 over the training records as converted (instruction / output), in order: what a run trained
    on, whatever its source (a local file, a hub dataset, the synthetic generator)."""
    h = hashlib.sha256()
    for r in records:
        h.update(json.dumps(r, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()


def input_differences(stored: dict | None, current: dict) -> list[str]:
    """``what: sha256 a -> b`` for each input of ``current`` (``run.json``'s ``inputs``: ``data_files``,
    ``records_sha256``) whose hash differs from what ``stored`` recorded; an input ``stored`` did not record
    (a run from before inputs were hashed) is not compared."""
    stored = stored or {}
    out = []
    for f, sha in (current.get("data_files") or {}).items():
        old = (stored.get("data_files") or {}).get(f)
        if old is not None and old != sha:
            out.append(f"data file {f}: sha256 {old[:12]} -> {sha[:12]}")
    old, new = stored.get("records_sha256"), current.get("records_sha256")
    if old is not None and new is not None and old != new:
        out.append(f"training records: sha256 {old[:12]} -> {new[:12]}")
    return out


def check_model_dir(model_dir: str | Path) -> None:
    """A local model directory's ``config.json`` is there and a JSON object: a ``ValueError`` naming the file
    and the fix otherwise (transformers' own report is a trace). A hub id (not a directory) is not checked."""
    d = Path(str(model_dir))
    if not d.is_dir():
        return
    cfg = d / "config.json"
    if not cfg.is_file():
        raise ValueError(f"model directory {d} has no config.json: point model_path (or model.name_or_path) at a "
                         "saved Hugging Face model (save_pretrained), or a training run's final/")
    try:
        ok = isinstance(json.loads(cfg.read_text(encoding="utf-8")), dict)
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise ValueError(f"{cfg} is not a valid JSON object: the model directory is damaged or not a Hugging Face "
                         "model; copy or save the model again")


def damaged_weights(model_dir: str | Path) -> list[str]:
    """The ``*.safetensors`` files of ``model_dir`` that are not whole (cut short by a full disk or a
    kill mid-copy): a header that does not parse, or a size other than 8 + header + the last tensor's
    end. Reads the headers only; an empty list when every file is whole (or there are none)."""
    import json
    import struct

    bad = []
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            size = f.stat().st_size
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > size - 8:
                    raise ValueError("header longer than the file")
                header = json.loads(fh.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
            if size != 8 + n + end:
                raise ValueError(f"{size} bytes, the header describes {8 + n + end}")
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            bad.append(f"{f.name} ({e})")
    return bad


def weights_sha256(model_dir: str | Path) -> str:
    """One sha256 over a model directory's ``*.safetensors`` files (name and bytes, in name order)."""
    h = hashlib.sha256()
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def run_is_complete(run_dir: str | Path) -> bool:
    """A training run finished: its ``final/`` model exists, its weights are whole, and ``run.json``
    says complete."""
    d = Path(run_dir)
    try:
        rec = RunRecord.of_run_dir(d)
    except BadRecord:
        return False  # a torn or foreign run.json: not complete, so training redoes it
    return (d / FINAL / "config.json").exists() and rec is not None and rec.status == "complete" and \
        not damaged_weights(d / FINAL)


def seed_list(override: str) -> list[int]:
    """The seeds of a ``seed=0,1,2`` override. An empty list is an error, not "every seed": a run
    root without its seed level would stand for all the seeds stored under it."""
    try:
        seeds = [int(s) for s in override.split("=", 1)[1].split(",") if s != ""]
    except ValueError:
        raise ValueError(f"{override!r}: seeds are integers, e.g. seed=0,1,2") from None
    if not seeds:
        raise ValueError(f"{override!r} names no seed: give at least one, e.g. seed=0,1,2")
    if neg := [s for s in seeds if s < 0]:
        raise ValueError(f"{override!r}: seed {neg[0]} is negative; seeds are integers >= 0, e.g. seed=0,1,2")
    return seeds


class RunDirBusy(RuntimeError):
    """Another process holds a run dir's lock (``RunDirLock``): one line naming it."""


class RunDirLock:
    """An exclusive ``flock`` on ``path`` for one writer (a training of a run dir, an evaluation of a
    generations file): a second one stops with one line naming the holder's pid instead of writing the
    same files twice. The kernel drops the lock when its holder dies, so a lock left by a killed process
    is simply taken over; the file itself stays (removing it would race a waiting peer)."""

    def __init__(self, path: str | Path, what: str, fix: str):
        self.path, self.what, self.fix = Path(path), what, fix
        self.fd = None

    def __enter__(self):
        import fcntl
        import os

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise RunDirBusy(f"{self.path.with_suffix('')} is being written by another {self.what} (pid {holder}); "
                               f"{self.fix}") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc):
        import os

        os.close(self.fd)


PRUNED = "pruned.json"  # what ``prune`` deleted from a run dir, and the sha256 of the weights it held


def prune(run_dir: str | Path) -> dict:
    """Delete a finished run's weights (``final/``, ``checkpoints/``) once its results are published, keeping its
    records (``run.json``, ``eval/``, logs) and writing ``pruned.json``: the sha256 of the final weights and the
    bytes freed. A study of a 0.5B model (2 GB a run) that keeps every run's results and none of its weights
    (``keep_weights: false``). The run is no longer complete (``run_is_complete``): a later evaluation retrains it.
    Refuses a run that is not complete, so weights nothing was measured on are never lost."""
    import shutil

    d = Path(run_dir)
    if not run_is_complete(d):
        raise ValueError(f"{d}: not a complete run (final/ with whole weights and run.json complete); nothing pruned")
    freed = sum(f.stat().st_size for sub in (FINAL, "checkpoints") for f in (d / sub).rglob("*") if f.is_file())
    info = {"weights_sha256": weights_sha256(d / FINAL), "removed": [FINAL, "checkpoints"], "bytes_freed": freed}
    (d / PRUNED).write_text(json.dumps(info, indent=2) + "\n")
    for sub in ("checkpoints", FINAL):  # final/ last: until it goes the run still reads as complete
        shutil.rmtree(d / sub, ignore_errors=True)
    return info


def main(argv: list[str] | None = None) -> int:
    """``python -m numlearn.rundirs prune RUN_DIR``: ``prune`` (the pipeline's last step of a study with
    ``keep_weights: false``)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m numlearn.rundirs")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prune", help="delete a published run's weights, keep its records").add_argument("run_dir")
    a = ap.parse_args(argv)
    try:
        info = prune(a.run_dir)
    except ValueError as e:
        print(f"numlearn.rundirs: error: {e}", file=sys.stderr)
        return 2
    print(f"[prune] {a.run_dir}: weights {info['weights_sha256'][:12]} deleted, {info['bytes_freed'] / 2**30:.2f} GiB "
          "freed (pruned.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
