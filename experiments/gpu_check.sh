#!/usr/bin/env bash
# The GPU check for a short loan (one H100/H200, <= 8 minutes, nothing downloaded at run time):
# the Qwen2.5-1.5B architecture from scratch with the real Qwen2.5 tokenizer at max_length 1500, bf16,
# 40 steps each of loss=mle and loss=del through the paper's accelerate config with one process
# (tokens/s, peak GPU memory: what the DEL term costs), then hf-backend generation on 64 GSM8K
# prompts. Writes results/gpu_check/summary.json. Steps and goals: experiments/gpu_check.py.
#
#   bash experiments/gpu_check.sh              # on the GPU machine
#   bash experiments/gpu_check.sh --dry-run    # anywhere: the plan, every file and import, 2 steps of a shrunken model
#
# The GPU machine has torch / transformers / accelerate but no Hydra: the small wheels it needs
# (hydra-core, omegaconf, antlr4-python3-runtime; liger-kernel for the loss stage's reference) travel with the
# tree in $WHEELS (make gpu-check-wheels)
# and are installed from there, offline. numlearn itself is used from src/ (no install). Data and the
# tokenizer come from ./data and ./assets (make data assets), or NUMLEARN_DATA_DIR / NUMLEARN_ASSETS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
[[ -x .venv/bin/python && -z "${PYTHON:-}" && "${GPU_CHECK_SYSTEM_PYTHON:-0}" != 1 ]] && PY=.venv/bin/python
WHEELS=${WHEELS:-.gpu_check_wheels}
export PYTHONPATH="$(pwd)/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export WANDB_MODE=offline
if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
  if [[ -d $WHEELS ]]; then
    echo "gpu_check: installing hydra-core / omegaconf from $WHEELS (offline)"
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" hydra-core==1.3.8 omegaconf==2.3.1
  else
    echo "gpu_check: hydra-core / omegaconf missing and no $WHEELS folder; run \`make gpu-check-wheels\` and carry it" >&2
    exit 2
  fi
fi
# Liger-Kernel's fused linear CE, the loss stage's outside reference (optional: its Triton comes with CUDA torch)
if [[ " $* " != *" --dry-run "* ]] && ! "$PY" -c "import liger_kernel" 2>/dev/null && [[ -d $WHEELS ]]; then
  "$PY" -m pip install -q --no-index --no-deps --find-links "$WHEELS" liger-kernel==0.8.5 \
    || echo "gpu_check: liger-kernel did not install; the loss stage runs without it" >&2
fi
exec "$PY" experiments/gpu_check.py "$@"
