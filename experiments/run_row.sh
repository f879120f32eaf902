#!/usr/bin/env bash
# One row of the embedded default (a loss, or loss:alpha): train, then evaluate, every seed.
#   experiments/run_row.sh PYTHON SEED_LIST ROW [EVALUATE_OVERRIDE ...]
# Called by `make reproduce-table1` and `make sweep-alpha` (with eval=synthetic_val), several rows
# at a time (JOBS); output lines carry the row.
set -euo pipefail
py=$1 seeds=$2 row=$3
shift 3
loss=${row%%:*}
extra=()
[[ $row == *:* ]] && extra=("loss.alpha=${row##*:}")
"$py" -m numlearn.train -m experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds" 2>&1 \
  | sed -u "s/^/[$row train] /"
"$py" -m numlearn.evaluate -m experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds" "$@" 2>&1 \
  | sed -u "s/^/[$row evaluate] /"
