#!/usr/bin/env bash
# One row of the embedded default (a loss, or loss:alpha): train, evaluate, and publish the result
# files into the committed store (results/runs), every seed.
#   [REUSE=1] experiments/run_row.sh PYTHON SEED_LIST ROW [EVALUATE_OVERRIDE ...]
# Called by `make reproduce-table1` and `make sweep-alpha` (with eval=synthetic_val), several rows
# at a time (JOBS); output lines carry the row. REUSE=1: only the seeds the store lacks a result
# for (python -m numlearn.rundirs --pending: missing, or trained with another recipe), so a
# many-seed table is produced over several sittings.
# NUMLEARN_STORE: the store (default results/runs).
set -euo pipefail
store=${NUMLEARN_STORE:-results/runs}
py=$1 seeds=$2 row=$3
shift 3
loss=${row%%:*}
extra=()
[[ $row == *:* ]] && extra=("loss.alpha=${row##*:}")
if [[ ${REUSE:-0} == 1 ]]; then
  seeds=$("$py" -m numlearn.rundirs --pending --store "$store" experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds" "$@" \
    2> >(sed -u "s/^/[$row] /" >&2))
  if [[ -z $seeds ]]; then echo "[$row] every seed has stored results (REUSE=1): nothing to run"; exit 0; fi
  echo "[$row] seeds without stored results: $seeds"
fi
"$py" -m numlearn.train -m experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds" 2>&1 \
  | sed -u "s/^/[$row train] /"
"$py" -m numlearn.evaluate -m experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds" "$@" 2>&1 \
  | sed -u "s/^/[$row evaluate] /"
mapfile -t dirs < <("$py" -m numlearn.rundirs experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds")
"$py" -m numlearn.reporting.store publish "${dirs[@]}" --outputs "${NUMLEARN_OUTPUT_DIR:-outputs}" --store "$store" 2>&1 \
  | sed -u "s/^/[$row] /"
