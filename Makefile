# titanflow: `make run` sets up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The cpu profile's Python (profiles/cpu/.python-version; titanflow doctor reads the same file).
CPU_PYTHON := $(shell cat profiles/cpu/.python-version)

.PHONY: setup run test test-fast test-lowest test-upstream overlays-upstream setup-lowest goldens assets clean server stop chromium overlay-trn2 setup-trn2 slurm-packages slurm-up slurm-down

# The cpu install profile (profiles/cpu). torch is installed first and alone, pinned to the CPU
# build (2.13.0); the project and its extra `cpu` (torchtitan 0.3.0, transformers 5.23.0) then
# install under the profile's constraints, so nothing can resolve a multi-GB CUDA build.
$(STAMP): pyproject.toml profiles/cpu/constraints.txt
	$(PYTHON) -c 'import sys; v = "$(CPU_PYTHON)"; assert "%d.%d" % sys.version_info[:2] == v, "the cpu profile needs Python " + v'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -c profiles/cpu/constraints.txt -e '.[cpu,test]'
	touch $(STAMP)

setup: $(STAMP)

assets: setup
	$(BIN)/titanflow assets

# The main job: the native Qwen3 scenario on CPU, random init, embedded tiny model.
run: assets
	$(BIN)/titanflow run native --target cpu

# Two pytest-xdist workers: the runs wait on servers, schedulers and timeouts about half the time,
# which the other worker fills (tests/conftest.py keeps each shared server or cluster on one worker).
# In collection order (no reordering by group size): the long end-to-end runs first, the unit tests after.
# PYTEST_ARGS adds options, e.g. make test PYTEST_ARGS=--durations=40.
test: setup overlay-trn2 overlays-upstream chromium slurm-packages setup-lowest
	TITANFLOW_UPSTREAM_SNAPSHOTS=$(UPSTREAM_SNAPSHOTS) $(BIN)/python -m pytest -q -rs -n 2 --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-lowest

# The lowest end of pyproject.toml's ranges (profiles/cpu-lowest: Prefect, prefect-kubernetes, pandas, pyarrow,
# filelock, psutil, matplotlib at the lowest each admits) in a venv of its own, .venv-lowest, the same stack and the
# same editable source otherwise. The lane runs there what those packages decide: the training slot, the cancels
# (the watch, a deployment run's), the server restart, the deployments, the queued logs and events, the history table.
LOWEST := .venv-lowest
LOWEST_TESTS := tests/unit/prefect_ops/test_training_slot.py tests/unit/prefect_ops tests/unit/record \
	"tests/unit/test_install_profiles.py::test_installing_titanflow_into_a_venv_of_either_end_changes_none_of_its_packages" \
	tests/unit/flows/test_scenario_record.py tests/e2e/test_deployments.py tests/e2e/test_training_slot_runs.py \
	"tests/e2e/test_failure_runs.py::test_a_deployment_run_cancelled_while_training_ends_its_ranks_and_is_recorded_cancelled"
# The canary runs both venvs whichever starts it: the main suite's run covers it.
LOWEST_SKIP := --deselect "tests/e2e/test_deployments.py::test_the_canary_runs_the_lowest_lane_beside_cpu_reports_the_packages_and_leaves_the_nightly_alone"
$(LOWEST)/.installed: pyproject.toml profiles/cpu-lowest/constraints.txt
	test -x $(LOWEST)/bin/python || $(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(LOWEST)/bin/pip install --quiet --disable-pip-version-check -c profiles/cpu-lowest/constraints.txt -e '.[cpu,test]'
	touch $@

setup-lowest: $(LOWEST)/.installed

# TITANFLOW_CPU_REPORT=<file>.csv (every test's CPU, tests/helpers/cpu_budget.py): this lane's go to <file>-lowest.csv
test-lowest: setup-lowest
	$(if $(TITANFLOW_CPU_REPORT),TITANFLOW_CPU_REPORT=$(basename $(TITANFLOW_CPU_REPORT))-lowest.csv) $(LOWEST)/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder $(LOWEST_TESTS) $(LOWEST_SKIP) $(PYTEST_ARGS)

# Unit tests only (skips the end-to-end flow runs).
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -m "not e2e" $(PYTEST_ARGS)

# Every golden the tests compare with, made again from the registries, real renders and real runs (then commit the
# diff it leaves): deployments/prefect.yaml whole (titanflow.prefect_ops.deployments), the trn2 renders and the
# Kubernetes pool template, and the cpu loss curves of every scenario x init (tests/e2e/test_scenarios.py: minutes) and of
# the walkthrough mode (tests/e2e/test_walkthrough_mode.py).
# After adding a scenario or a target, this is the one command to run.
goldens: setup
	$(BIN)/python -m titanflow.prefect_ops.deployments
	TITANFLOW_UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/unit/launch/test_render.py \
		tests/unit/launch/test_kubernetes_template.py tests/e2e/test_scenarios.py tests/e2e/test_walkthrough_mode.py

# The trn2 profile's PyPI packages (profiles/trn2/requirements.txt: the walkthrough's transformers
# 5.16.0) layered on the cpu venv: first on PYTHONPATH they replace its transformers 5.23.0, and
# everything else is the venv's (--no-deps: 5.16.0's own requirements all hold there; the test checks
# it). tests/e2e/test_transformers_516.py runs the cpu scenarios with it.
OVERLAY_TRN2 := $(VENV)/overlays/trn2
$(OVERLAY_TRN2)/.installed: $(STAMP) profiles/trn2/requirements.txt profiles/trn2/constraints.txt
	rm -rf $(OVERLAY_TRN2)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --target $(OVERLAY_TRN2) \
		-c profiles/trn2/constraints.txt -r profiles/trn2/requirements.txt
	touch $@

overlay-trn2: $(OVERLAY_TRN2)/.installed

# The torchtitan window's lanes (docs/trn2-walkthrough.md, "The torchtitan window"): each upstream snapshot of
# $(UPSTREAM_SNAPSHOTS) installed beside the cpu venv, once per content key, with what it requires that the venv lacks
# (tests/upstream/overlays.py); tests/upstream/ renders, checks and trains each against the docs' table (make test
# runs them too). A snapshot not in the folder skips its lane with a message (-rs prints it). The folder:
# UPSTREAM_SNAPSHOTS=<folder> or $TITANFLOW_UPSTREAM_SNAPSHOTS.
UPSTREAM_SNAPSHOTS ?= $(or $(TITANFLOW_UPSTREAM_SNAPSHOTS),../shared/upstream/torchtitan)
overlays-upstream: setup
	TITANFLOW_UPSTREAM_SNAPSHOTS=$(UPSTREAM_SNAPSHOTS) $(BIN)/python tests/upstream/overlays.py

test-upstream: overlays-upstream
	TITANFLOW_UPSTREAM_SNAPSHOTS=$(UPSTREAM_SNAPSHOTS) $(BIN)/python -m pytest -q -rs tests/upstream $(PYTEST_ARGS)

# The trn2 profile on the node (docs/install.md, "On a trn2 node"): titanflow on top of the walkthrough's
# stack in the Neuron 2.33 DLAMI's venv, replacing none of it. PRINT=1 prints the commands only; SCENARIOS="moe ..."
# has titanflow doctor check the runs of those scenarios (their weights) instead of native's (each trn2 deployment's pull
# step names its own: deployments/prefect.yaml).
setup-trn2:
	bash profiles/trn2/setup.sh $(if $(PRINT),--print) $(foreach s,$(SCENARIOS),--scenario $(s))

# Headless Chromium (Debian package) for tests/e2e/test_browser.py; CI machines are fresh Debian, as root.
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium)

# Debian's Slurm (slurm-wlm 22.05) and munge for the two-node cluster on loopback that the Slurm tests start and
# stop themselves (titanflow.launch.slurm.cluster, the slurm_cluster fixture); CI machines are fresh Debian, as root.
slurm-packages:
	test -x /usr/sbin/slurmctld -a -x /usr/sbin/munged || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge)

# That cluster by hand (nodes n1, n2 on 127.0.0.1, partition debug), in $TMPDIR/titanflow-slurm (default /tmp): prints the
# SLURM_CONF to export; make slurm-down cancels its jobs and stops the daemons it recorded, by PID.
slurm-up: setup slurm-packages
	$(BIN)/python -m titanflow.launch.slurm.cluster up

slurm-down: setup
	$(BIN)/python -m titanflow.launch.slurm.cluster down

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
