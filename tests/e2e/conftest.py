"""End-to-end fixtures: the local Prefect server and the one passing deployment run, shared by
test_deployments.py and test_browser.py (one server start, one training)."""

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
