"""Reading data files: the one JSON / JSONL reader (``read_records``) and its error (``DataError``), below the
sources and the derivations that read GSM8K (``numlearn.data.sources``, ``numlearn.data.gsm8k_pot``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file is missing or a record is malformed."""


def read_records(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise DataError(f"data file not found: {p}. Set paths.data_dir (or NUMLEARN_DATA_DIR) to the data "
                        "root, see docs/data.md.")
    if p.is_dir():
        raise DataError(f"{p} is a directory, not a data file: name the JSONL / JSON file inside it "
                        f"(e.g. {next((str(f) for f in sorted(p.glob('*.json*'))), p / 'train.jsonl')})")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: not UTF-8 text (byte {e.start}); expected JSON lines or a JSON array") from None
    except OSError as e:
        raise DataError(f"{p}: cannot be read ({e.strerror or e}); check the path and its permissions") from None
    if not text.strip():
        raise DataError(f"{p}: the file is empty; expected JSON lines or a JSON array of records")
    if p.suffix == ".json" and text.lstrip().startswith("["):
        try:
            out = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{p}: not a valid JSON array ({e.msg} at line {e.lineno})") from None
        lines = range(1, len(out) + 1)
    else:
        out, lines = [], []
        # lines end at "\n" (and "\r\n") only: str.splitlines() also splits at U+2028 / U+0085 / \x1c.., which
        # valid JSON may hold raw inside a string
        for i, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{p}:{i}: not valid JSON ({e.msg})") from None
                lines.append(i)
    for i, rec in zip(lines, out):
        if not isinstance(rec, dict):
            raise DataError(f"{p}:{i}: a record must be a JSON object, got {type(rec).__name__}")
    return out
