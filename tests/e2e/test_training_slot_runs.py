"""The training slot with real runs: a server restarted mid-training (as a process supervisor would, with
``prefect server start`` and nothing of titanflow's) loses no slot, nor the cancel of a later run; and a run that
waits for the slot says whom it waits for and records the wait apart from training.

Runs last among the e2e tests (file order): the restart replaces the session's deployment server.
"""

from __future__ import annotations

import contextvars
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers.deployment_runs import PASS_DEPLOYMENT, run_deployment

from titanflow.launch.process import wait_gone
from titanflow.prefect_ops.slot import limit_name, read_holder, training_slot
from titanflow.paths import REPO_ROOT
from titanflow.prefect_ops import server
from titanflow.prefect_ops.local_server import api_healthy
from titanflow.record.summary import read_summary

TITANFLOW = Path(sys.executable).parent / "titanflow"
PREFECT = Path(sys.executable).parent / "prefect"
#: Seconds the server stays down: longer than Prefect's own lease-renewal retries (about 5 s).
DOWN_S = 20


def _wait_for(what: str, ready, timeout_s: float, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while not (value := ready()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)
    return value


def _cli_run(runs_dir: Path, api_url: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TITANFLOW), "run", "native", "--target", "cpu", "--runs-dir", str(runs_dir), *options],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PREFECT_API_URL": api_url})


def _restart_server(state: server.ServerState) -> None:
    """SIGTERM the recorded server, keep it down DOWN_S, start a bare ``prefect server start`` on the same port
    from the repository root (so only prefect.toml configures it), and record it for the session's stop."""
    old = next(p for p in state.processes if p.role == "server")
    os.killpg(old.pid, signal.SIGTERM)
    assert wait_gone(old.pid, 30)
    time.sleep(DOWN_S)
    port = state.api_url.rsplit(":", 1)[1].split("/")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_SERVER")} | {"PREFECT_HOME": state.home}
    with open(Path(state.home) / "server-restarted.log", "ab") as log:
        proc = subprocess.Popen([str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", port],
                                cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state.processes[state.processes.index(old)] = server.Started(
        "server", proc.pid, psutil.Process(proc.pid).create_time(), log.name)
    state.save()
    _wait_for("the restarted server answering", lambda: api_healthy(state.api_url, 1.0), 90)


def _run_logs(client, flow_run_id) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return [log.message for log in client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))]


def _held_slot(api_url: str, release: threading.Event) -> tuple[threading.Thread, threading.Event]:
    """A thread that takes the training slot as run ``test-holder`` and keeps it until ``release``; its event is set
    once it holds it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    holding = threading.Event()

    def hold():
        with temporary_settings({PREFECT_API_URL: api_url}), training_slot(run_id="test-holder"):
            holding.set()
            release.wait(600)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(hold,))
    thread.start()
    return thread, holding


@pytest.mark.fault
def test_server_restart_mid_training_keeps_the_slot_and_frees_it_after_and_a_cancel_still_reaches_a_run(deployed,
                                                                                                       tmp_path):
    """A 12-step deployment run trains through a server restart and frees the slot after. Then a run queued behind
    the slot, which the test takes at once, is set Cancelling and ends Cancelled, recorded cancelled: within seconds
    when the worker's own cancellation watch survived the restart, after the grace of the run's own watch
    (titanflow.prefect_ops.cancel_watch) when it gave up (Prefect 3.9 logs "flow run cancellation will fail")."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.states import Cancelling

    from titanflow.prefect_ops.cancel_watch import POLL_S, SUPERVISOR_GRACE_S

    run = run_deployment(deployed.api_url, PASS_DEPLOYMENT, "steps=12", "run_id=slot-restart",
                         f"runs_dir={tmp_path}", watch=False)
    assert run.flow_run_id, run.output[-3000:]
    train_log = tmp_path / "slot-restart" / "train.log"
    _wait_for("the first training step", lambda: train_log.is_file() and "step:  1" in train_log.read_text(), 300)
    _restart_server(deployed)
    with SyncPrefectClient(deployed.api_url) as client:
        final = _wait_for("the run to finish", lambda: (s := client.read_flow_run(run.flow_run_id).state).is_final()
                          and s, 600, every_s=3)
        assert final.is_completed(), final.message
        limit = client.read_global_concurrency_limit_by_name(limit_name())
        assert limit.active_slots == 0  # released by the run itself, through the restarted server
    summary = read_summary(tmp_path / "slot-restart" / "summary.json")
    assert summary.verdict == "pass" and len(summary.losses) == 12

    release = threading.Event()
    holder, holding = _held_slot(deployed.api_url, release)
    try:
        assert holding.wait(10)  # free at once after the restart: no wait for a slot the server lost
        queued = run_deployment(deployed.api_url, PASS_DEPLOYMENT, "steps=2", "run_id=queued",
                                f"runs_dir={tmp_path}", watch=False)
        assert queued.flow_run_id, queued.output[-3000:]
        with SyncPrefectClient(deployed.api_url) as client:
            _wait_for("the queued run to wait for the slot", lambda: any(
                "held by run test-holder" in m for m in _run_logs(client, queued.flow_run_id)), 300)
            asked = time.monotonic()
            client.set_flow_run_state(queued.flow_run_id, Cancelling(message="cancelled by the test"))
            state = _wait_for("the queued run to end", lambda: (s := client.read_flow_run(queued.flow_run_id).state)
                              .is_final() and s, SUPERVISOR_GRACE_S + 60, every_s=1)
            ended_s = time.monotonic() - asked
            logs = _run_logs(client, queued.flow_run_id)
    finally:
        release.set()
        holder.join()
    # whether the worker still listens is a race in Prefect: its watch gives up when its polls fail during the restart
    # (its first poll's retries against the server's return) and comes back at the worker's next sync with the server;
    # measured both ways here. Either way the run ends Cancelled: by its own watch, after the grace, when the worker
    # did not stop it
    by_watch = any("and its worker has not stopped it" in m for m in logs)
    print(f"\nqueued run set Cancelling after the restart: {state.name} {ended_s:.0f} s later, stopped by "
          f"{'its own cancel watch' if by_watch else 'the worker'}")
    assert state.is_cancelled() and ended_s < SUPERVISOR_GRACE_S + 2 * POLL_S + 20, (state, ended_s)
    assert not by_watch or ended_s >= SUPERVISOR_GRACE_S, ended_s
    queued_summary = read_summary(tmp_path / "queued" / "summary.json")
    assert queued_summary.verdict == "cancelled" and queued_summary.losses == []
    assert queued_summary.cancelled.cause.startswith("cancelled (SIGTERM")


def test_a_run_waiting_for_the_slot_names_the_holder_and_records_the_wait_apart(prefect_api, tmp_path):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    hold_s = 25.0
    release = threading.Event()
    holder, holding = _held_slot(prefect_api, release)
    assert holding.wait(60)
    threading.Timer(hold_s, release.set).start()
    proc = _cli_run(tmp_path, prefect_api, "--steps", "2")
    holder.join()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"waiting for the training slot {limit_name()} (1 slot), held by run test-holder" in proc.stderr  # the run log
    (run_dir,) = tmp_path.iterdir()
    summary = read_summary(run_dir / "summary.json")
    # the run reached the slot some seconds into the hold (setup, render), then waited the rest
    assert 5 < summary.slot_wait_s < hold_s + 5
    assert summary.timings_s["train"] < summary.train.wall_s + 10  # training's time is training alone
    with temporary_settings({PREFECT_API_URL: prefect_api}):
        assert read_holder(limit_name()) is None
