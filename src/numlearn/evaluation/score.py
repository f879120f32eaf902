"""Recompute metrics from generation JSONL files alone, under either protocol.

    python -m numlearn.evaluation.score <generations.jsonl>... [--check [--rerun-programs] [--regenerate K]]
    python -m numlearn.evaluation.score <generations.jsonl>... --protocol official --write

Nothing is generated and no program is run: each line keeps its attempts' completions and program
outputs, so one generation pass yields both tables. The benchmark and answer kind are read from
the sibling result.json. ``--check`` exits 1 when the metrics recomputed under the result's own
protocol differ from those stored, when the file's hash chain does not verify up to the head
result.json records (a line edited after it was written), or when a line's ground truth is not the one the
benchmark file it pinned (sha256) gives for that problem (read from the data root; a truth that cannot be
read here is said so, not assumed); ``--rerun-programs`` also re-executes every
recorded program in the sandbox and compares its output with the recorded one (a forger can recompute a
keyless chain, not what the programs print); ``--regenerate K`` generates K random lines again from the recorded
model and compares them (greedy decoding: exact where the backend is deterministic, ``regenerate``); ``--write`` stores a rescored copy as ``result.<protocol>.json``
beside it (the aggregator reads those with ``--protocol``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from numlearn.cli import benchmark_configs, find_conf_dir
from numlearn.records import RESULT, BadRecord, ResultRecord

from .results import result_fields
from .runner import ProgramExecutor, make_attempts, read_jsonl, rescore, walk_chain
from .scorers import PROTOCOLS
from .spec import BenchmarkSpec, register_benchmarks


def _same(a, b, tol=1e-9) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= tol
    return a == b


def rescore_records(recs: list[dict], stored: dict, protocol: str) -> tuple[dict, list[dict]]:
    """The result fields (``result_fields``: metrics, per-problem scores) and rows of a result's generations
    (``recs``, as read) under ``protocol``."""
    wanted = set(stored.get("correct_by_id") or {}) or None
    if wanted is not None:
        recs = [r for r in recs if r["id"] in wanted]
    force = bool(((stored.get("config") or {}).get("eval") or {}).get("force_choice_letter", False))
    b = stored["benchmark"]
    spec = BenchmarkSpec.from_config(b["spec"]) if b.get("spec") else b["name"]
    recs = rescore(recs, spec, protocol, force)
    return result_fields(recs, b["kind"]), recs


def check_chain(path: Path, stored: dict) -> tuple[bool, str]:
    """(verified, one line): the file's chain against the head result.json recorded."""
    chain = ((stored.get("generation") or {}).get("chain")) or None
    if chain is None:
        return True, "no hash chain recorded (result written before generations were chained): metrics compared only"
    walk = walk_chain(path, chain["run_key"])
    if walk.broken_at is not None:
        return False, f"hash chain broken at line {walk.broken_at} (id {walk.broken_id}): edited after it was written"
    if walk.unchained:
        return False, f"{walk.unchained} line(s) without a chain digest after line {walk.lines}"
    if (walk.head, walk.lines) != (chain["head"], chain["lines"]):
        return False, (f"hash chain verifies over {walk.lines} line(s) but ends at {walk.head[:12]}, not at the head "
                       f"{RESULT} records ({chain['head'][:12]}, {chain['lines']} lines)")
    return True, f"hash chain verified over {walk.lines} line(s) up to the recorded head {walk.head[:12]}"


def check_truths(recs: list[dict], stored: dict, data_dir: str | Path, cache_dir: str | Path) -> tuple[bool | None, str]:
    """(verified, one line): each line's ground truth (``gt_raw``) against the benchmark file the result pinned
    (its sha256), read from the data root (a local file) or regenerated (a synthetic split). None: the benchmark
    could not be read here (the line says why and what fixes it); False: a truth differs, or the file does."""
    from omegaconf import OmegaConf

    from numlearn.data.sources import DataError

    from .benchmarks import _load_records, read_records, resolve_file, sha256_file

    b = stored.get("benchmark") or {}
    bcfg = (((stored.get("config") or {}).get("eval") or {}).get("benchmarks") or {}).get(b.get("name"))
    if not bcfg:
        return None, "ground truths not checked: the result holds no benchmark config (written before results kept it)"
    try:
        path, _ = resolve_file(OmegaConf.create(bcfg), data_dir, cache_dir)
    except DataError as e:
        return None, f"ground truths not checked: {e}"
    if not path.is_file():
        return None, (f"ground truths not checked: {path} is not here; get the benchmark with `make data` (or pass "
                      "--data-dir)")
    if b.get("sha256") and (digest := sha256_file(path)) != b["sha256"]:
        return False, (f"the benchmark file {path} has sha256 {digest[:12]}, the result was scored against "
                       f"{b['sha256'][:12]}: its ground truths are not the ones this file gives")
    truths = {str(pid): str(a) for pid, _, a in _load_records(b["name"], b.get("loader") or bcfg.get("loader"),
                                                               read_records(path))}
    bad = [r["id"] for r in recs if truths.get(str(r["id"])) != str(r.get("gt_raw"))]
    if bad:
        return False, (f"{len(bad)} line(s) hold a ground truth the benchmark does not give, e.g. id {bad[0]}: "
                       f"{recs[[r['id'] for r in recs].index(bad[0])].get('gt_raw')!r} (benchmark: "
                       f"{truths.get(str(bad[0]))!r})")
    return True, f"ground truths of {len(recs)} line(s) match the pinned benchmark file (sha256 {b.get('sha256', '')[:12]})"


def regenerate(recs: list[dict], stored: ResultRecord, k: int, seed: int = 0) -> tuple[list[str], int]:
    """Generate ``k`` lines again (drawn with ``seed``) from the model the result names, with its backend, dtype and
    sampling, one prompt at a time, and return what differs from the recorded completions (``"<id> attempt <a>:
    ..."``) and how many attempts were compared. Decoding is greedy, so where the backend is deterministic the
    completions are equal byte for byte: the hf backend on CPU is (fp32 and bf16 alike), one prompt or a padded
    batch (``tests/test_evaluation.py``). vLLM on a GPU is not guaranteed to be: batch composition and kernels
    can flip a near-tie, so there a difference is a signal to look at, not proof of a forgery."""
    import random

    from .backends import get_backend
    from .backends.base import SamplingConfig

    model = stored.extra.get("model_path")
    backend = stored.extra.get("backend") or {}
    samp = stored.extra.get("sampling") or {}
    if not model or not samp:
        raise ValueError("the result records no model_path or sampling: it cannot be regenerated")
    be = get_backend(backend.get("backend", "hf"), model, dtype=backend.get("dtype") or "float32", batch_size=1)
    sampling = SamplingConfig(max_new_tokens=int(samp["max_new_tokens"]), temperature=float(samp.get("temperature", 0)),
                              top_p=float(samp.get("top_p", 1.0)), stop=tuple(samp.get("stop") or ()))
    picked = random.Random(seed).sample(recs, min(k, len(recs)))
    diffs, n = [], 0
    for r in picked:
        for a, att in enumerate(r.get("attempts", [])):
            (again,) = be.generate([att["prompt"]], sampling)
            n += 1
            if again != att["completion"]:
                diffs.append(f"{r['id']} attempt {a}: recorded {att['completion'][:40]!r}, regenerated {again[:40]!r}")
    return diffs, n


def rerun_programs(recs: list[dict], timeout_s: float, allow_unsafe: bool = False, workers: int = 0) -> list[str]:
    """Re-execute every attempt's program (as written and as the official executor wraps it) and return
    what differs from the recorded runs: ``"<id> attempt <k> <strict|official>: ..."`` (empty: all agree).
    An attempt recorded with a run whose completion holds no program counts as a difference too."""
    import os

    atts = [(r["id"], k, a) for r in recs for k, a in enumerate(r.get("attempts", []))]
    with ProgramExecutor(timeout_s, allow_unsafe, workers or os.cpu_count() or 1) as ex:
        fresh = make_attempts("rerun", [a.get("prompt", "") for _, _, a in atts],
                              [a.get("completion", "") for _, _, a in atts], ex)
    diffs = []
    for (rid, k, a), f in zip(atts, fresh):
        old, new = a.get("program"), f["program"]
        if (old is None) != (new is None):
            diffs.append(f"{rid} attempt {k}: a program run is recorded for a completion "
                         f"{'without' if new is None else 'with'} a program {'in it' if new is None else '(none recorded)'}")
            continue
        for side in ("strict", "official") if old else ():
            was, now = old.get(side) or {}, new[side]
            if (was.get("output"), bool(was.get("ok"))) != (now["output"], bool(now["ok"])):
                diffs.append(f"{rid} attempt {k} {side}: recorded {was.get('output')!r:.40} (ok={was.get('ok')}), "
                             f"re-run {now['output']!r:.40} (ok={now['ok']})")
    return diffs


def main_check_one(p: Path, stored: ResultRecord, m: dict, recs: list[dict], truths: tuple, rerun: bool) -> bool:
    """``--check`` of one file (each finding on stderr): the recomputed metrics against the stored ones, the hash
    chain, the ground truths against the pinned benchmark (``truths``: ``check_truths``'s answer) and, with
    ``rerun``, every recorded program run again."""
    # metrics added since the file was written (e.g. the program-stop counts) are not compared
    ok = set(stored.metrics) <= set(m) and _same({k: m[k] for k in stored.metrics}, stored.metrics)
    print(f"{p}: metrics {'match' if ok else 'DIFFER FROM'} {RESULT}", file=sys.stderr)
    chained, line = check_chain(p, stored.extra)
    print(f"{p}: {line}", file=sys.stderr)
    print(f"{p}: {truths[1]}", file=sys.stderr)
    ok = ok and chained and truths[0] is not False
    if rerun:
        sandbox = stored.extra.get("sandbox") or {}
        diffs = rerun_programs(recs, float(stored.extra.get("pot_timeout_s") or 5.0),
                               bool(sandbox.get("allow_unsafe_exec", False)))
        n_prog = sum(bool(x.get("program")) for r in recs for x in r.get("attempts", []))
        print(f"{p}: {n_prog} recorded program run(s) re-executed: "
              + ("all outputs agree" if not diffs else f"{len(diffs)} differ, e.g. " + "; ".join(diffs[:3])),
              file=sys.stderr)
        ok = ok and not diffs
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--protocol", choices=PROTOCOLS, default=None,
                    help="answer the generations under this protocol (default: the result's own)")
    ap.add_argument("--check", action="store_true", help="compare with the stored result.json")
    ap.add_argument("--rerun-programs", action="store_true",
                    help="with --check: re-execute every recorded program in the sandbox and compare its output")
    ap.add_argument("--write", action="store_true", help="write result.<protocol>.json beside each file")
    ap.add_argument("--regenerate", type=int, default=0, metavar="K",
                    help="with --check: generate K random lines again from the recorded model (greedy) and compare")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="with --check: the data root the benchmark files are read from (default: NUMLEARN_DATA_DIR, "
                         "else the evaluation's paths.data_dir); every ground truth is checked against the pinned file")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="with --check: where the synthetic benchmarks are generated (default: the evaluation's)")
    a = ap.parse_args(argv)
    from numlearn.cli import configure_logging

    configure_logging()
    if (a.rerun_programs or a.regenerate) and not a.check:
        ap.error("--rerun-programs and --regenerate are part of --check: add --check")
    if a.regenerate < 0:
        ap.error("--regenerate K: K is a number of lines >= 0")
    conf = find_conf_dir()
    if conf is not None:  # a result written before results kept their benchmark's spec names it only
        register_benchmarks(benchmark_configs(conf))
    status = 0
    for f in a.files:
        p = Path(f)
        res_path = p.with_name(RESULT)
        if not res_path.exists():
            print(f"{p}: no {RESULT} beside it (written by numlearn.evaluate); cannot tell the benchmark",
                  file=sys.stderr)
            return 2
        try:
            stored = ResultRecord.read(res_path)
        except BadRecord as e:
            print(e, file=sys.stderr)
            return 2
        recs = read_jsonl(p)[0]
        if a.check:  # a verdict is recomputed from the benchmark's own answer, never from the line's stored truth
            paths = (stored.to_dict().get("config") or {}).get("paths") or {}
            truths_ok, truth_line = check_truths(
                recs, stored.to_dict(), a.data_dir or os.environ.get("NUMLEARN_DATA_DIR") or paths.get("data_dir") or "data",
                a.cache_dir or paths.get("cache_dir") or "data_cache")
        if "attempts" not in (recs or [{}])[0]:
            print(f"{p}: written before generations kept their attempts; re-run numlearn.evaluate to rescore",
                  file=sys.stderr)
            return 2
        protocol = a.protocol or stored.protocol
        if a.check and truths_ok is False:
            print(f"{p}: {truth_line}", file=sys.stderr)
            print(f"{p}: DIFFERS FROM {RESULT}", file=sys.stderr)
            status |= 1
            continue
        fields, recs = rescore_records(recs, stored.to_dict(), protocol)
        m = fields["metrics"]
        print(json.dumps({"file": str(p), "protocol": protocol, "metrics": m}, indent=1))
        if a.check:
            if protocol != stored.protocol:
                print(f"{p}: --check compares under the result's own protocol; drop --protocol", file=sys.stderr)
                return 2
            ok = main_check_one(p, stored, m, recs, (truths_ok, truth_line), a.rerun_programs)
            if a.regenerate > 0:
                diffs, n = regenerate(recs, stored, a.regenerate)
                print(f"{p}: {n} attempt(s) of {min(a.regenerate, len(recs))} line(s) generated again: "
                      + ("all completions equal" if not diffs else f"{len(diffs)} differ, e.g. {diffs[0]}"),
                      file=sys.stderr)
                ok = ok and not diffs
            print(f"{p}: {'matches' if ok else 'DIFFERS FROM'} {RESULT}", file=sys.stderr)
            status |= 0 if ok else 1
        if a.write:
            out = replace(stored, protocol=protocol, **fields,
                          extra={**stored.extra, "n": m["n"], "rescored_from": str(p)})
            out.write(p.with_name(f"result.{protocol}.json"))
    return status


if __name__ == "__main__":
    sys.exit(main())
