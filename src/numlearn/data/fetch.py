"""``make data``: download the seven benchmark files from their public sources (pinned commits,
conf/eval/benchmark/*.yaml ``url``) and verify each sha256. Needs a network."""

from __future__ import annotations

import argparse
import hashlib
import sys
import urllib.request
from pathlib import Path

from omegaconf import OmegaConf

from numlearn.cli import REPO_ROOT


def fetch(out: Path, names: list[str] | None = None) -> int:
    bad = 0
    for f in sorted((REPO_ROOT / "conf" / "eval" / "benchmark").glob("*.yaml")):
        b = OmegaConf.load(f)
        if not b.get("file") or (names and b.name not in names):
            continue
        dest = out / b.file
        if dest.exists() and hashlib.sha256(dest.read_bytes()).hexdigest() == b.sha256:
            print(f"ok       {b.name}: {dest}")
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        print(f"fetching {b.name}: {b.url}", flush=True)
        try:
            data = urllib.request.urlopen(b.url, timeout=60).read()
        except OSError as e:
            print(f"error    {b.name}: {e}", file=sys.stderr)
            bad += 1
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != b.sha256:
            print(f"error    {b.name}: sha256 {digest} != {b.sha256}; not written", file=sys.stderr)
            bad += 1
            continue
        dest.write_bytes(data)
        print(f"ok       {b.name}: {dest}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data", help="data root to write benchmarks/ under (then paths.data_dir=<out>)")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    return fetch(Path(a.out), a.names or None)


if __name__ == "__main__":
    sys.exit(main())
