"""Test environment: Prefect state and run folders in a per-session temporary folder.

PREFECT_HOME must be set before anything imports prefect, so it is set here at
import time. The titanflow cache (tokenizer, tiny weights, the pretrained tiny
checkpoint, compile caches) is the project's own (``.cache`` or
``$TITANFLOW_CACHE``): its folders are keyed by a hash of their inputs, so a
build is reused only when nothing that decides it changed (tests/unit/weights/test_assets.py
builds into a fresh folder of its own).

Unit tests live under ``tests/unit/<package>/`` (one folder per titanflow subpackage, plus
``titan_cfg`` and ``flows``), end-to-end runs under ``tests/e2e/`` (their server fixtures in
``tests/e2e/conftest.py``), shared helpers in ``tests/helpers/``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
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

# Several tests send Ctrl-C (SIGINT) to themselves or to a command they started. A shell without job control
# starts a background command with SIGINT ignored (POSIX), Python then installs no KeyboardInterrupt handler, and
# every process started from here would inherit the ignore: give the session Python's own handler back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from helpers import FIXTURES  # noqa: E402  (tests/ is on the path: this folder's conftest)


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
def prefect_api():
    """One Prefect server (titanflow.prefect_ops.local_server) for the end-to-end command-line runs, which would
    otherwise each start a temporary one (about 14 s each); its API URL."""
    from titanflow.prefect_ops.local_server import temporary_server

    with temporary_server(_SESSION_DIR / "prefect-server.log") as api_url:
        yield api_url


#: The end-to-end tests' folder: every test in it is marked ``e2e`` (make test-fast leaves them out).
E2E_DIR = Path(__file__).parent / "e2e"


def pytest_configure(config):
    """The suite's CPU budget, measured per test and printed at the end (tests/helpers/cpu_budget.py)."""
    from helpers import cpu_budget

    config.pluginmanager.register(cpu_budget, "titanflow-cpu-budget")


#: Session fixtures that must exist once: every test using one runs on the same xdist worker.
_SHARED_FIXTURE_GROUPS = {"deployed": "deployed-server", "slurm_cluster": "slurm-cluster",
                          "native_golden_run": "native-runs", "nightly_planted_lr": "native-runs"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Markers: ``e2e`` for every test under tests/e2e/, ``server`` for a test that uses a Prefect server fixture.
    Groups for ``pytest -n 2 --dist loadgroup`` (make test): the tests of one shared session fixture
    (the deployed server, the Slurm cluster, the native golden and nightly runs) together on one worker, so each
    starts or trains once; every unit-test
    module together, so its module fixtures (a Prefect test server) start once; every other end-to-end
    test on its own, so the two workers share out the long runs. Each worker has its own session folder
    (this module runs once per worker): Prefect home, runs, history and servers are never shared."""
    for item in items:
        if E2E_DIR in item.path.parents:  # end-to-end because of where it lives
            item.add_marker(pytest.mark.e2e)
        if "prefect_server" in item.fixturenames or "prefect_api" in item.fixturenames:
            item.add_marker(pytest.mark.server)
        shared = [group for fixture, group in _SHARED_FIXTURE_GROUPS.items() if fixture in item.fixturenames]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
        elif item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_sessionfinish(session, exitstatus):
    """Stop any temporary server Prefect started itself (a flow run with no API URL) while the session's output is
    still open: Prefect's own exit hook would stop it later and log to a closed stream ('--- Logging error ---')."""
    if "prefect.server.api.server" in sys.modules:
        from prefect.events.worker import EventsWorker
        from prefect.server.api.server import SubprocessASGIServer

        EventsWorker.drain_all()  # the events still to send go to the server before it stops
        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def prefect_server():
    """A temporary Prefect server (SQLite in a temporary folder) for the module, heartbeats off. Prefect's events
    worker is drained before and after: it stays bound to the API it first sent to, so without this the module's
    task-run events (which record task runs, e.g. a probe task's) would go to an earlier module's server, gone."""
    from prefect.events.worker import EventsWorker
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    EventsWorker.drain_all()
    with prefect_test_harness(server_startup_timeout=90), \
            temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
        EventsWorker.drain_all()


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real two-node Slurm cluster on loopback (titanflow.launch.slurm.cluster: munged, slurmctld and two slurmd), started
    on first use with ``SLURM_CONF`` set for the session, and stopped at the session's end by the PIDs it recorded
    (its daemons also get SIGTERM if the session dies first). ``make test`` installs the Debian packages
    (make slurm-packages); without them the tests that need the cluster fail, saying so."""
    from titanflow.launch.slurm import cluster as slurm

    missing = slurm.missing_programs()
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): run make slurm-packages (as root)")
    folder = Path(tempfile.mkdtemp(prefix="titanflow-slurm-", dir="/tmp"))  # reachable by the munge user
    running = slurm.up(folder, tie_to_caller=True)
    env = pytest.MonkeyPatch()
    env.setenv("SLURM_CONF", running.slurm_conf)
    try:
        yield running
    finally:
        env.undo()
        slurm.down(folder)
        shutil.rmtree(folder, ignore_errors=True)
