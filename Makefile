# titanflow: `make run` sets up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-fast assets clean

# torch is installed first and alone, pinned to the CPU build (2.13.0); the project then
# pins it again, so nothing can resolve a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "titanflow needs Python 3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

assets: setup
	$(BIN)/titanflow assets

# The main job: the native Qwen3 scenario on CPU, random init, embedded tiny model.
run: assets
	$(BIN)/titanflow run native --target cpu

test: setup
	$(BIN)/python -m pytest -q

# Unit tests only (skips the end-to-end flow runs).
test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

clean:
	rm -rf runs .cache
