# Front door of the monorepo (design/architecture.md). `make help` lists the targets.
PAPERS := sdar vad vitabench2
PAPER ?= sdar
SCALE ?= cpu
SEEDS ?= 0
ENV ?= alfworld
UV_VERSION := 0.13.9
UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
EXTRAS := --extra alfworld --extra scienceworld
RUN := $(UV) run --locked $(EXTRAS)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export WANDB_MODE := disabled

.PHONY: help setup test test-slow reproduce eval report bench lint data check-paper

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14
	@echo "papers: $(PAPERS)    e.g. make reproduce PAPER=sdar [SCALE=cpu|paper] [SEEDS=0,1,2]"

setup:  ## install uv if missing, sync the locked environment, build the offline models
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv==$(UV_VERSION)
	$(UV) sync --locked $(EXTRAS)
	$(RUN) python -m agentrl_shared.models

check-paper:
	@case " $(PAPERS) " in *" $(PAPER) "*) ;; *) echo "Unknown PAPER=$(PAPER); valid: $(PAPERS)"; exit 2;; esac

test: setup  ## run the offline test suite (no GPU, no network)
	$(RUN) pytest -q

test-slow: setup  ## also run the slow tests (minutes)
	$(RUN) pytest -q -m "not gpu"

reproduce: check-paper setup  ## run a paper's plan: PAPER=sdar SCALE=cpu|paper SEEDS=0[,1,...]
	$(RUN) $(PAPER) reproduce --scale $(SCALE) --seeds $(SEEDS)

eval: check-paper setup  ## evaluate a config: PAPER=sdar CONFIG=<name> [ARGS="model.name_or_path=..."]
	$(RUN) $(PAPER) eval --config $(CONFIG) $(ARGS)

report: check-paper setup  ## regenerate a paper's README results table and curves from result files
	$(RUN) $(PAPER) report

bench: setup  ## side-by-side speed ratios; writes bench-results.json
	$(RUN) python -m sdar.bench
	$(RUN) python -m agentrl_shared.bench_envs
	$(RUN) python -m vad.bench
	$(RUN) python -m vitabench2.bench

lint:  ## ruff check and format check
	$(UV) run --locked ruff check .
	$(UV) run --locked ruff format --check .

data: setup  ## fetch a benchmark's official data where the network allows: ENV=alfworld
	$(RUN) python -m agentrl_shared.envs.data $(ENV)
