"""Test environment: Prefect state and run folders in a per-session temporary folder.

PREFECT_HOME must be set before anything imports prefect, so it is set here at
import time. The titanflow cache (tokenizer, tiny weights, the pretrained tiny
checkpoint, compile caches) is the project's own (``.cache`` or
``$TITANFLOW_CACHE``): its folders are keyed by a hash of their inputs, so a
build is reused only when nothing that decides it changed (tests/test_assets.py
builds into a fresh folder of its own).

The local Prefect server and the one passing deployment run are session fixtures here, so
tests/test_deployments.py and tests/test_browser.py share them (one server start, one training).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="titanflow-tests-"))
os.environ["PREFECT_HOME"] = str(_SESSION_DIR / "prefect")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "90"
os.environ["TITANFLOW_RUNS"] = str(_SESSION_DIR / "runs")
os.environ["TITANFLOW_HISTORY"] = str(_SESSION_DIR / "history")
os.environ["HF_HOME"] = str(_SESSION_DIR / "hf")
os.environ["HF_HUB_OFFLINE"] = "1"

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def tiny_assets():
    """The offline tokenizer, tiny Qwen3 weights and dataset (built once per session, ~3 s)."""
    from titanflow.assets import ensure_assets

    return ensure_assets()


@pytest.fixture()
def config_only_folder(tmp_path, tiny_assets):
    """Factory: ``make(fixture_name, folder_name) -> Path``, a weights folder named like the published
    model, with the config.json in ``tests/fixtures/<fixture_name>/`` and the offline Qwen3 tokenizer
    (no weights)."""

    def make(name: str, folder_name: str) -> Path:
        folder = tmp_path / folder_name
        shutil.copytree(FIXTURES / name, folder)
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tiny_assets.tokenizer_dir / file, folder)
        return folder

    return make


@pytest.fixture()
def instruct_2507_folder(config_only_folder) -> Path:
    """Qwen3-4B-Instruct-2507's config.json and the offline Qwen3 tokenizer (no weights)."""
    return config_only_folder("qwen3-4b-instruct-2507", "Qwen3-4B-Instruct-2507")


@pytest.fixture(scope="session")
def deployed(tmp_path_factory):
    """A local Prefect server with titanflow's pools, deployments and a cpu worker (25-45 s to start;
    tests/deployment_runs.py ``local_server``), shared by tests/test_deployments.py and
    tests/test_browser.py and stopped at the session's end."""
    import json

    from deployment_runs import SERVER_STARTS, local_server

    with local_server(tmp_path_factory.mktemp("prefect-server")) as state:
        print(f"\nlocal Prefect server started at {state.api_url} (server starts this session: {len(SERVER_STARTS)}); "
              f"timings (s): {json.dumps({k: round(v, 1) for k, v in state.timings_s.items()})}")
        yield state


@pytest.fixture(scope="session")
def passing_deployment_run(deployed, tmp_path_factory):
    """The one passing deployment run (3 steps, run_id deploy-pass, ~1-1.5 min) that
    tests/test_deployments.py and tests/test_browser.py both check: a ``deployment_runs.PassingRun``."""
    from deployment_runs import passing_run

    return passing_run(deployed.api_url, tmp_path_factory.mktemp("deploy-pass-runs"))


@pytest.fixture(scope="session")
def prefect_api():
    """One Prefect server (titanflow.local_server) for the end-to-end command-line runs, which would
    otherwise each start a temporary one (about 14 s each); its API URL."""
    from titanflow.local_server import temporary_server

    with temporary_server(_SESSION_DIR / "prefect-server.log") as api_url:
        yield api_url


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)
