"""experiments/compute_used.py: core-hours per experiment from run dirs, checkable by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("compute_used", Path(__file__).resolve().parents[1] / "experiments"
                                              / "compute_used.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def _run(d: Path, exp: str, train_s: float, threads: int, evals: list[tuple[float, int]], status="complete"):
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"experiment": exp, "status": status, "train_runtime_s": train_s,
                                            "environment": {"torch_threads": threads}}))
    for i, (s, t) in enumerate(evals):
        f = d / "eval" / f"b{i}" / "cot" / "result.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"wall_seconds": s, "environment": {"torch_threads": t}, "mode": "cot",
                                 "benchmark": {"name": f"b{i}"}, "metrics": {"accuracy": 0.5, "n": 2}}))


def test_core_hours_sum_wall_time_times_threads_per_experiment(tmp_path, capsys):
    # a: 1800 s x 2 threads training + (900 s x 2 + 360 s x 1) evaluation = 1 h + 0.6 h
    _run(tmp_path / "o" / "a" / "seed=0", "a", 1800, 2, [(900, 2), (360, 1)])
    # a again, interrupted: 3600 s x 1 thread, no results; b: 7200 s x 1, one result of 36 s x 1
    _run(tmp_path / "o" / "a" / "seed=1", "a", 3600, 1, [], status="running")
    _run(tmp_path / "p" / "b" / "seed=0", "b", 7200, 1, [(36, 1)])
    rows = {r["experiment"]: r for r in mod.table([tmp_path / "o", tmp_path / "p"])}
    assert (rows["a"]["runs"], rows["a"]["incomplete"], rows["a"]["results"]) == (2, 1, 2)
    assert (rows["a"]["train_core_s"], rows["a"]["eval_core_s"]) == (7200.0, 2160.0)
    assert (rows["b"]["train_core_s"], rows["b"]["eval_core_s"]) == (7200.0, 36.0)
    assert mod.main([str(tmp_path / "o"), str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "| a | 2 | 1 | 2 | 2.00 | 0.60 | 2.60 |" in out and "| all | 3 | 1 | 3 | 4.00 | 0.61 | 4.61 |" in out
    assert mod.main([str(tmp_path / "missing")]) == 2
    assert "no such output root" in capsys.readouterr().err
    # a malformed record is named, not a traceback
    (tmp_path / "p" / "b" / "seed=0" / "run.json").write_text('{"experiment": "b", "status": "runn')
    assert mod.main([str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "compute_used: error:" in err and "seed=0/run.json" in err and "not a readable run record" in err
