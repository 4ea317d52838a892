"""End-to-end fixtures, each made once per session and read by several test modules: the local Prefect server and
the one passing deployment run (test_deployments.py, test_browser.py: one server start, one training), the native
golden run (test_scenarios.py, test_terminal_view.py, test_compare_runs.py) and the nightly's planted learning-rate
regression (test_nightly_run.py, test_compare_runs.py). tests/conftest.py keeps the tests of each on one worker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def deployed(tmp_path_factory):
    """A local Prefect server with titanflow's pools, deployments and a cpu worker (25-45 s to start;
    helpers/deployment_runs.py ``local_server``), shared by test_deployments.py and
    test_browser.py and stopped at the session's end."""
    import json

    from helpers.deployment_runs import SERVER_STARTS, local_server

    with local_server(tmp_path_factory.mktemp("prefect-server")) as state:
        print(f"\nlocal Prefect server started at {state.api_url} (server starts this session: {len(SERVER_STARTS)}); "
              f"timings (s): {json.dumps({k: round(v, 1) for k, v in state.timings_s.items()})}")
        yield state


@pytest.fixture(scope="session")
def passing_deployment_run(deployed, tmp_path_factory):
    """The one passing deployment run (3 steps, run_id deploy-pass, ~1-1.5 min) that
    test_deployments.py and test_browser.py both check: a ``deployment_runs.PassingRun``."""
    from helpers.deployment_runs import passing_run

    return passing_run(deployed.api_url, tmp_path_factory.mktemp("deploy-pass-runs"))


@pytest.fixture(scope="session")
def native_golden_run(tmp_path_factory):
    """The native scenario's golden run (cpu, random init, default parameters: 10 steps at lr 8e-4,
    helpers.scenario_runs.golden_run) on a pseudo-terminal, on the temporary server ``titanflow run`` starts itself
    (no PREFECT_API_URL): (its summary, the screen at the end). About a minute."""
    from helpers.scenario_runs import golden_run

    return golden_run(tmp_path_factory.mktemp("native-golden"), "native", terminal=True)


@pytest.fixture(scope="session")
def nightly_planted_lr(tmp_path_factory, prefect_api):
    """``titanflow nightly --scenarios native --inits random --lr 1.6e-3`` on the session's server: the golden run's
    workload at twice its learning rate, a regression the suite must fail as numerics. (the completed process,
    the runs folder). About a minute."""
    import os
    import subprocess

    from helpers.terminal import TITANFLOW

    runs_dir = tmp_path_factory.mktemp("nightly-planted-lr")
    proc = subprocess.run([str(TITANFLOW), "nightly", "--target", "cpu", "--scenarios", "native", "--inits", "random",
                           "--lr", "1.6e-3", "--runs-dir", str(runs_dir)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PREFECT_API_URL": prefect_api})
    return proc, runs_dir
