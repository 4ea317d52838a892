"""Helpers shared by tests/e2e/test_deployments.py and tests/e2e/test_browser.py: a local Prefect server
started by titanflow.prefect_ops.server, ``prefect deployment run`` against it as a user types it, and the one
passing deployment run both modules check (tests/conftest.py makes the server and that run
session fixtures, so a session that runs both modules starts one server and trains once)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from uuid import UUID

import psutil
import pytest

from titanflow.prefect_ops import server
from titanflow.record.summary import RunSummary, read_summary

PREFECT_CLI = Path(sys.executable).parent / "prefect"


#: Seconds between a test worker's polls (Prefect's default, which `make server` keeps, is 10 s);
#: shorter here only to save test time. Pick-up latency is bounded by it.
TEST_WORKER_QUERY_SECONDS = "2"

#: The deployment of the passing run (3 steps of native/cpu/random init, ~1-1.5 min on 2 cores)
#: and that run's id, which names its folder under ``runs_dir`` and appears in its logs.
PASS_DEPLOYMENT = "qwen3-scenario/native-cpu-random"
PASS_RUN_ID = "deploy-pass"
PASS_STEPS = 3

#: api_url of every server ``local_server`` started in this process, in order (printed by the
#: session fixture: a session that runs both modules shows exactly one).
SERVER_STARTS: list[str] = []


@contextlib.contextmanager
def local_server(home: Path) -> Iterator[server.ServerState]:
    """``titanflow.prefect_ops.server.start`` on a free port with its home in ``home``; on exit ``stop``, then
    check that no process it started (or any of theirs) is left.

    The worker inherits this process's environment (tests/conftest.py: TITANFLOW_RUNS, HF offline),
    plus ``PREFECT_WORKER_QUERY_SECONDS`` (set for as long as the server runs). The server's scheduler
    is off: a test session that crosses 02:00 UTC must not start the nightly suite's cron run.
    """
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_WORKER_QUERY_SECONDS", TEST_WORKER_QUERY_SECONDS)
        env.setenv("PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED", "false")
        state = server.start(home, port=0)
        SERVER_STARTS.append(state.api_url)
        started = [psutil.Process(p.pid) for p in state.processes]
        try:
            yield state
        finally:
            family = [q for p in started if p.is_running() for q in (p, *p.children(recursive=True))]
            server.stop(home)
            left = [q for q in family if q.is_running() and q.status() != psutil.STATUS_ZOMBIE]
            assert not left, f"titanflow.prefect_ops.server.stop left processes behind: {left}"


@dataclass
class DeploymentRun:
    """One ``prefect deployment run`` command: exit code, output, the flow run it created (None when
    refused before creating one) and its wall time in seconds."""

    returncode: int
    output: str
    flow_run_id: UUID | None
    wall_s: float


def run_deployment(api_url: str, name: str, *params: str, watch: bool = True, timeout_s: float = 600) -> DeploymentRun:
    """``prefect deployment run NAME --param P ... [--watch]`` with ``PREFECT_API_URL=api_url``."""
    argv = [str(PREFECT_CLI), "deployment", "run", name, *(a for p in params for a in ("--param", p))]
    env = {**os.environ, "PREFECT_API_URL": api_url, "COLUMNS": "200"}
    t0 = time.monotonic()
    done = subprocess.run([*argv, *(["--watch"] if watch else [])], capture_output=True, text=True,
                          timeout=timeout_s, env=env)
    output = done.stdout + done.stderr
    found = re.search(r"UUID: ([0-9a-f-]{36})", output)
    return DeploymentRun(done.returncode, output, UUID(found.group(1)) if found else None, time.monotonic() - t0)


def state_times(api_url: str, flow_run_id: UUID) -> dict[str, float]:
    """Seconds since the epoch at which the flow run first entered each state, by state name
    (Scheduled: created by ``deployment run``; Pending: a worker picked it up; Running; Completed/Failed)."""
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(api_url) as client:
        states = client.read_flow_run_states(flow_run_id)
    times: dict[str, float] = {}
    for state in sorted(states, key=lambda s: s.timestamp):
        times.setdefault(state.name, state.timestamp.timestamp())
    return times


@dataclass
class PassingRun:
    """The session's passing deployment run: the ``prefect deployment run --watch`` result and the
    folder the flow run wrote (``<runs_dir>/<PASS_RUN_ID>``: summary.json, metrics.csv, train.log)."""

    run: DeploymentRun
    run_dir: Path

    def summary(self) -> RunSummary:
        """The run's summary.json, validated (titanflow.record.summary)."""
        return read_summary(self.run_dir / "summary.json")


def passing_run(api_url: str, runs_dir: Path) -> PassingRun:
    """``prefect deployment run PASS_DEPLOYMENT --param steps=3 --param run_id=deploy-pass
    --param runs_dir=RUNS_DIR --watch``; the result is returned whatever its exit code (the tests assert it)."""
    run = run_deployment(api_url, PASS_DEPLOYMENT, f"steps={PASS_STEPS}", f"run_id={PASS_RUN_ID}",
                         f"runs_dir={runs_dir}")
    return PassingRun(run, runs_dir / PASS_RUN_ID)
