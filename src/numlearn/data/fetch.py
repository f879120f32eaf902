"""``make data``: fill the data root with the seven benchmark files and the local training files,
each checked against the sha256 pinned in its config (``conf/eval/benchmark/*.yaml``; the
``fetch:`` lists of ``conf/data/*.yaml``).

    python -m numlearn.data.fetch --out data                       # download from the pinned URLs
    NUMLEARN_DATA_MIRROR=/path/to/copy python -m numlearn.data.fetch --out data   # copy from a local mirror

A file already present with the right checksum is kept; a wrong checksum is never written.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import urllib.request
from pathlib import Path

from omegaconf import OmegaConf

from numlearn.cli import conf_dir


def wanted_files(conf: Path | None = None) -> list[dict]:
    """``{"name", "file", "sha256", "url"}`` for every file a config reads from the data root (``conf``: the
    config tree, ``numlearn.cli.conf_dir()`` by default). Benchmarks are read through their one schema
    (``numlearn.schema.BenchmarkConfig``): a local benchmark may have no ``url`` and no ``sha256``."""
    from numlearn.schema import load_benchmark_config

    conf = Path(conf_dir()) if conf is None else Path(conf)
    out = []
    for f in sorted((conf / "eval" / "benchmark").glob("*.yaml")):
        b = load_benchmark_config(f)
        if b.file:
            out.append({"name": b.name, "file": b.file, "sha256": b.sha256, "url": b.url})
    for f in sorted((conf / "data").glob("*.yaml")):
        if f.stem.startswith("_"):
            continue
        d = OmegaConf.load(f)
        for e in d.get("fetch") or []:
            out.append({"name": d.name, "file": e.file, "sha256": e.sha256, "url": e.url})
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(out: Path, names: list[str] | None = None, mirror: Path | None = None) -> int:
    bad = 0
    for w in wanted_files():
        if names and w["name"] not in names:
            continue
        dest = out / w["file"]
        if dest.exists() and (w["sha256"] is None or _sha(dest.read_bytes()) == w["sha256"]):
            print(f"ok       {w['name']}: {dest}" + ("" if w["sha256"] else " (no sha256 pinned: not checked)"))
            continue
        if mirror is None and not w["url"]:
            print(f"error    {w['name']}: a local benchmark (no url in its config): put {w['file']} under {out}",
                  file=sys.stderr)
            bad += 1
            continue
        try:
            if mirror is not None:
                print(f"copying  {w['name']}: {mirror / w['file']}", flush=True)
                data = (mirror / w["file"]).read_bytes()
            else:
                print(f"fetching {w['name']}: {w['url']}", flush=True)
                data = urllib.request.urlopen(w["url"], timeout=60).read()
        except OSError as e:
            print(f"error    {w['name']}: {e}", file=sys.stderr)
            bad += 1
            continue
        if w["sha256"] and _sha(data) != w["sha256"]:
            print(f"error    {w['name']}: sha256 {_sha(data)} != {w['sha256']}; not written", file=sys.stderr)
            bad += 1
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_bytes(data)
        shutil.move(tmp, dest)
        print(f"ok       {w['name']}: {dest}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data", help="data root to fill (the default paths.data_dir is ./data)")
    ap.add_argument("--mirror", default=os.environ.get("NUMLEARN_DATA_MIRROR"),
                    help="copy from this local folder (same layout) instead of downloading; env NUMLEARN_DATA_MIRROR")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    return fetch(Path(a.out), a.names or None, Path(a.mirror) if a.mirror else None)


if __name__ == "__main__":
    sys.exit(main())
