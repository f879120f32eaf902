#!/usr/bin/env bash
# One Table 1 row of the embedded default: train, then evaluate, every seed.
#   experiments/table1_row.sh PYTHON SEED_LIST ROW     (ROW = loss, or loss:alpha)
# Called by `make reproduce-table1`, several rows at a time (JOBS); output lines carry the row.
set -euo pipefail
py=$1 seeds=$2 row=$3
loss=${row%%:*}
extra=()
[[ $row == *:* ]] && extra=("loss.alpha=${row##*:}")
for step in train evaluate; do
  "$py" -m "numlearn.$step" -m experiment=table1_tiny "loss=$loss" "${extra[@]}" "seed=$seeds" 2>&1 \
    | sed -u "s/^/[$row $step] /"
done
