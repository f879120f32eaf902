"""What a compute node without internet needs for a paper preset, fetched once on a machine with a network, each
item's commit recorded so a run can pin it:

    python -m numlearn.fetch --experiment table1_qwen2.5-1.5b [--released] [--dry-run] [--out outputs/fetch]

Items: the preset's model (``model.name_or_path`` at ``model.revision``) and its tokenizer, the training data of
a ``source: hf`` preset (``data.hf_name`` at ``data.load_kwargs.revision``: MathInstruct), and with ``--released``
the DEL authors' checkpoints and their bases (``conf/study/released.yaml``). Models and checkpoints are
downloaded into the Hugging Face cache (``huggingface_hub.snapshot_download``), data sets into the datasets cache
(``datasets.load_dataset``); the benchmark files are ``make data``'s, and are reported present or missing. The
record, ``<out>/<experiment>.json``, holds each item's resolved commit and the override that pins it
(``model.revision=<sha>``, ``data.load_kwargs.revision=<sha>``); copy the caches to the compute nodes and run
there with ``HF_HUB_OFFLINE=1``. ``--dry-run`` lists the items and touches no network. Offline, the first item the
hub cannot serve ends the command in one line naming it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Item:
    """One thing to fetch: ``kind`` model | tokenizer | dataset | checkpoint, the hub id, the revision asked for
    (None: main), the override that pins it, and for a dataset its split."""

    kind: str
    repo: str
    revision: str | None
    pin_key: str | None
    split: str | None = None


def _is_hub_id(name) -> bool:
    return bool(name) and not Path(str(name)).exists() and str(name).count("/") == 1 and \
        not str(name).startswith((".", "/", "$"))


def items_of(cfg, released: dict | None = None) -> list[Item]:
    """The hub items a composed training config (``cfg``) and the released study's models need."""
    out = []
    m = cfg.model
    if m.get("source") == "pretrained" and _is_hub_id(m.get("name_or_path")):
        out.append(Item("model", str(m.name_or_path), m.get("revision"), "model.revision"))
        tok = m.get("tokenizer")
        if tok not in (None, "", "same") and _is_hub_id(tok) and tok != m.name_or_path:
            out.append(Item("tokenizer", str(tok), None, None))
    d = cfg.data
    if d.get("source") == "hf" and d.get("hf_name"):
        rev = (d.get("load_kwargs") or {}).get("revision")
        out.append(Item("dataset", str(d.hf_name), rev, "data.load_kwargs.revision", str(d.get("split") or "train")))
    for spec in (released or {}).values():
        for key in ("hub", "base"):
            if spec.get(key) and _is_hub_id(spec[key]) and not any(i.repo == spec[key] for i in out):
                out.append(Item("checkpoint" if key == "hub" else "model", str(spec[key]), None, None))
    return out


def resolve(item: Item) -> str:
    """Download ``item`` into its cache and return the commit it resolved to."""
    from huggingface_hub import HfApi, snapshot_download

    if item.kind == "dataset":
        import datasets

        sha = HfApi().dataset_info(item.repo, revision=item.revision).sha
        datasets.load_dataset(item.repo, split=item.split, revision=sha)
        return str(sha)
    path = snapshot_download(item.repo, revision=item.revision)
    return Path(path).name  # .../snapshots/<commit>


def fetch(items: list[Item], resolver=resolve, say=print) -> list[dict]:
    """Each item fetched in turn (``resolver``: the download); the records, each with its commit and pin. The
    first failure is a ``RuntimeError`` in one line naming the item and the fix."""
    out = []
    for i, it in enumerate(items, 1):
        say(f"[fetch] {i}/{len(items)} {it.kind} {it.repo}" + (f" @ {it.revision}" if it.revision else ""))
        try:
            sha = resolver(it)
        except Exception as e:  # the hub's and datasets' errors are many classes; each ends here in one line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise RuntimeError(f"{it.kind} {it.repo}: the hub did not serve it ({type(e).__name__}: {first[:160]}); "
                               "run fetch on a machine with a network (and the model's licence accepted), then "
                               "copy the Hugging Face caches to the compute nodes") from None
        out.append({**asdict(it), "commit": sha, "pin": f"{it.pin_key}={sha}" if it.pin_key else None})
    return out


def _benchmark_files(ecfg, data_dir: Path) -> dict[str, bool]:
    """Each evaluated benchmark's file under the data root: present or not (``make data`` fetches them)."""
    return {str(n): (data_dir / str(b.file)).is_file() for n, b in (ecfg.eval.benchmarks or {}).items()
            if b.get("file")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m numlearn.fetch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", required=True, help="a conf/experiment preset (table1_qwen2.5-1.5b, ...)")
    ap.add_argument("--released", action="store_true", help="also the DEL authors' checkpoints and their bases")
    ap.add_argument("--dry-run", action="store_true", help="list what would be fetched; no network")
    ap.add_argument("--out", type=Path, default=Path("outputs/fetch"))
    a = ap.parse_args(argv)
    from numlearn.cli import conf_dir, preset_config

    try:
        cfg, ecfg = preset_config(a.experiment, config="config"), preset_config(a.experiment)
    except Exception as e:  # Hydra's MissingConfigException and friends: one line
        print(f"numlearn.fetch: error: --experiment {a.experiment}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    released = None
    if a.released:
        from numlearn.schema import load_study_config

        released = dict(load_study_config(Path(conf_dir()) / "study" / "released.yaml").models or {})
    items = items_of(cfg, released)
    files = _benchmark_files(ecfg, Path(str(ecfg.paths.data_dir)).expanduser())
    missing = sorted(n for n, ok in files.items() if not ok)
    print(f"[fetch] {a.experiment}: {len(items)} hub item(s); benchmark files {len(files) - len(missing)}/{len(files)}"
          " present" + (f" (missing: {', '.join(missing)}: make data)" if missing else ""))
    if a.dry_run:
        for it in items:
            print(f"  {it.kind:10} {it.repo}" + (f" @ {it.revision}" if it.revision else " @ main")
                  + (f"  (pin: {it.pin_key}=<sha>)" if it.pin_key else ""))
        return 0
    try:
        records = fetch(items)
    except RuntimeError as e:
        print(f"numlearn.fetch: error: {e}", file=sys.stderr)
        return 1
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{a.experiment}.json"
    path.write_text(json.dumps({"experiment": a.experiment, "items": records, "benchmark_files": files}, indent=2)
                    + "\n")
    pins = [r["pin"] for r in records if r["pin"]]
    print(f"[fetch] recorded in {path}" + (f"; pin them: {' '.join(pins)}" if pins else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
