"""vLLM against the hf backend on the same model, benchmarks and protocol: do they predict the same?

    make vllm-vs-hf          # SmolLM2-135M-Instruct, first 20 problems of each of the seven benchmarks
    python experiments/vllm_vs_hf.py outputs/vllm_vs_hf/hf outputs/vllm_vs_hf/vllm --out results/vllm_vs_hf

Reads two evaluation directories written by ``numlearn.evaluate`` (one per backend, everything else
equal), checks that they hold the same result files with the same fields, and compares, problem by
problem, the final prediction, correctness and the first attempt's completion. Every disagreement is
listed with its cause:

* ``decoding``: the completions diverge (greedy argmax flips once the two engines' fp32 sums differ
  in the last bits -- different kernels, batch shapes and KV-cache layouts); the text around the first
  differing character is shown;
* ``length``: one completion is a strict prefix of the other (one engine stopped earlier: a stop
  string matched at a token boundary the other did not produce, or the token budget);
* ``program``: the completions are identical but the executed programs' outputs differ (timeouts);
* ``backup``: the first attempts agree but the CoT backup (generated only when the PoT attempt gave
  no answer) differs.

Writes ``summary.json`` (agreement per benchmark, throughput of both backends from the result files'
``generation`` blocks) and ``report.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from numlearn.evaluation.runner import read_jsonl

AGREEMENT_TARGET = 0.95


def _rows(path: Path) -> dict[str, dict]:
    rows, bad = read_jsonl(path)
    if bad:
        raise SystemExit(f"{path}: {bad} unreadable line(s); re-run its evaluation to complete it")
    return {r["id"]: r for r in rows}


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _program_outputs(att: dict) -> dict | None:
    prog = att.get("program")
    if prog is None:
        return None
    return {k: (r or {}).get("ok") and (r or {}).get("output") for k, r in prog.items()}


def _cause(ra: dict, rb: dict) -> tuple[str, str]:
    """Why two lines for the same problem differ, and the evidence."""
    atts_a, atts_b = ra.get("attempts") or [], rb.get("attempts") or []
    for k, (x, y) in enumerate(zip(atts_a, atts_b)):
        ca, cb = x.get("completion") or "", y.get("completion") or ""
        if ca != cb:
            i = _first_difference(ca, cb)
            label = "length" if i == min(len(ca), len(cb)) else "decoding"
            where = "first attempt" if k == 0 else "CoT backup"
            ctx = f"{where}, char {i} of {len(ca)}/{len(cb)}: hf {ca[max(0, i - 30):i + 30]!r} | vllm {cb[max(0, i - 30):i + 30]!r}"
            return (label if k == 0 else "backup"), ctx
        runs_a, runs_b = _program_outputs(x), _program_outputs(y)
        if runs_a != runs_b:
            return "program", f"attempt {k}: program output hf {runs_a!r} | vllm {runs_b!r}"
    if len(atts_a) != len(atts_b):
        return "backup", f"attempts: hf {len(atts_a)}, vllm {len(atts_b)}"
    return "scoring", "same completions and program runs, different prediction"


def _gen(result: dict) -> dict:
    g = result.get("generation") or {}
    return {k: g.get(k) for k in ("generated_tokens", "backend_generate_seconds", "tokens_per_s")}


def compare(hf_dir: Path, vllm_dir: Path) -> dict:
    files_a = sorted(p.relative_to(hf_dir) for p in hf_dir.rglob("result.json"))
    files_b = sorted(p.relative_to(vllm_dir) for p in vllm_dir.rglob("result.json"))
    if not files_a:
        raise SystemExit(f"no result.json under {hf_dir}")
    out = {"hf_dir": str(hf_dir), "vllm_dir": str(vllm_dir), "same_result_files": files_a == files_b,
           "missing_in_vllm": [str(p) for p in files_a if p not in files_b],
           "extra_in_vllm": [str(p) for p in files_b if p not in files_a], "benchmarks": {}, "disagreements": []}
    tot = {"n": 0, "agree": 0, "same_completion": 0}
    for rel in files_a:
        if rel not in files_b:
            continue
        ra_res, rb_res = (json.loads((d / rel).read_text()) for d in (hf_dir, vllm_dir))
        name = f"{rel.parent.parent.name}/{rel.parent.name}"
        rows_a, rows_b = (_rows((d / rel).with_name("generations.jsonl")) for d in (hf_dir, vllm_dir))
        ids = sorted(set(rows_a) & set(rows_b), key=lambda x: (len(x), x))
        agree = same = 0
        for i in ids:
            a, b = rows_a[i], rows_b[i]
            same += (a["attempts"][0].get("completion") == b["attempts"][0].get("completion"))
            if str(a.get("pred")) == str(b.get("pred")):
                agree += 1
                continue
            cause, evidence = _cause(a, b)
            out["disagreements"].append({"benchmark": name, "id": i, "gt": a.get("gt"), "hf_pred": a.get("pred"),
                                         "vllm_pred": b.get("pred"), "hf_correct": a.get("correct"),
                                         "vllm_correct": b.get("correct"), "cause": cause, "evidence": evidence})
        out["benchmarks"][name] = {
            "n": len(ids), "prediction_agreement": agree / len(ids) if ids else None,
            "first_completion_identical": same / len(ids) if ids else None,
            "accuracy_hf": ra_res["metrics"]["accuracy"], "accuracy_vllm": rb_res["metrics"]["accuracy"],
            "same_fields": sorted(ra_res) == sorted(rb_res),
            "hf": _gen(ra_res), "vllm": _gen(rb_res),
            "backend_hf": ra_res.get("backend"), "backend_vllm": rb_res.get("backend"),
        }
        tot["n"] += len(ids)
        tot["agree"] += agree
        tot["same_completion"] += same

    def rate(which):
        toks = sum((b[which]["generated_tokens"] or 0) for b in out["benchmarks"].values())
        secs = sum((b[which]["backend_generate_seconds"] or 0) for b in out["benchmarks"].values())
        return {"generated_tokens": toks, "generate_seconds": round(secs, 1),
                "tokens_per_s": round(toks / secs, 1) if secs else None}

    out["overall"] = {"n": tot["n"], "prediction_agreement": tot["agree"] / tot["n"] if tot["n"] else None,
                      "first_completion_identical": tot["same_completion"] / tot["n"] if tot["n"] else None,
                      "target": AGREEMENT_TARGET, "hf": rate("hf"), "vllm": rate("vllm")}
    out["overall"]["meets_target"] = (out["overall"]["prediction_agreement"] or 0) >= AGREEMENT_TARGET
    return out


def report(s: dict, command: str | None) -> str:
    o = s["overall"]
    lines = ["# vLLM vs hf backend: same model, benchmarks and protocol", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    b0 = next(iter(s["benchmarks"].values()))
    lines += [f"Backends: hf {json.dumps(b0['backend_hf'])}; vllm {json.dumps(b0['backend_vllm'])}", "",
              f"**Final predictions agree on {o['prediction_agreement']:.1%} of {o['n']} problem-modes** "
              f"(target >= {o['target']:.0%}: {'met' if o['meets_target'] else 'NOT met'}); first completions "
              f"identical on {o['first_completion_identical']:.1%}. Same result files: {s['same_result_files']}.", "",
              f"Throughput (generated tokens / seconds inside `generate`): hf {o['hf']['tokens_per_s']} tokens/s "
              f"({o['hf']['generated_tokens']} tokens), vllm {o['vllm']['tokens_per_s']} tokens/s "
              f"({o['vllm']['generated_tokens']} tokens).", "",
              "| benchmark/mode | n | predictions agree | first completion identical | acc hf | acc vllm | hf tok/s | vllm tok/s |",
              "|---|---|---|---|---|---|---|---|"]
    for name, b in s["benchmarks"].items():
        lines.append(f"| {name} | {b['n']} | {b['prediction_agreement']:.0%} | {b['first_completion_identical']:.0%} | "
                     f"{b['accuracy_hf']:.3f} | {b['accuracy_vllm']:.3f} | {b['hf']['tokens_per_s']} | "
                     f"{b['vllm']['tokens_per_s']} |")
    lines += ["", f"## Every disagreement ({len(s['disagreements'])})", ""]
    if not s["disagreements"]:
        lines.append("None.")
    for d in s["disagreements"]:
        lines.append(f"- **{d['benchmark']} #{d['id']}** (gt {d['gt']!r}): hf {d['hf_pred']!r} "
                     f"({'right' if d['hf_correct'] else 'wrong'}), vllm {d['vllm_pred']!r} "
                     f"({'right' if d['vllm_correct'] else 'wrong'}) -- cause: {d['cause']}; {d['evidence']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir", type=Path)
    ap.add_argument("vllm_dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--command", default=None)
    a = ap.parse_args(argv)
    s = compare(a.hf_dir, a.vllm_dir)
    if a.command:
        s["command"] = a.command
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "summary.json").write_text(json.dumps(s, indent=2) + "\n")
    (a.out / "report.md").write_text(report(s, a.command))
    print(report(s, a.command))
    return 0 if s["same_result_files"] else 1


if __name__ == "__main__":
    sys.exit(main())
