# titanflow: `make run` sets up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-fast assets clean server stop chromium

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

test: setup chromium
	$(BIN)/python -m pytest -q

# Unit tests only (skips the end-to-end flow runs).
test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

# Headless Chromium (Debian package) for tests/e2e/test_browser.py; CI machines are fresh Debian, as root.
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium)

# A local Prefect server (SQLite in .prefect/), the work pools, every deployment of
# deployments/prefect.yaml and a worker on the cpu pool; prints the UI URL. PORT=0 picks a free port.
# The Prefect settings it relies on (leases on disk, analytics off) are in prefect.toml.
PORT ?= 4200
server: setup
	$(BIN)/python -m titanflow.prefect_ops.server start --port $(PORT)

# Ends exactly what `make server` started (the recorded PIDs, their process groups and children).
stop: setup
	$(BIN)/python -m titanflow.prefect_ops.server stop

clean:
	rm -rf runs .cache
