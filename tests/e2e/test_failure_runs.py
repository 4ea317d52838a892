"""End to end on a Prefect test server: a planted NaN fails as numerics and is not retried, while a
timed-out launch is infrastructure and retried twice, its logs kept. On the deployed server of
tests/e2e/conftest.py: a deployment run cancelled while it trains ends its ranks and is recorded as
cancelled, not as a failure."""

import shutil
import time

import pytest
from helpers.run_processes import (
    changed_history_cells,
    logged_steps,
    run_processes,
    train_run_count,
)

pytestmark = pytest.mark.fault


def test_planted_nan_fails_as_numerics_once_while_a_timed_out_launch_is_retried_twice(tmp_path):
    """The flow on a Prefect test server: lr 1e6 (NaN at step 3, measured) ends the train task after one
    run; an 8 s training timeout is infrastructure and runs it 1 + 2 retries times, then fails the run
    with its logs kept."""
    from prefect.testing.utilities import prefect_test_harness

    from titanflow.flows.scenario import qwen3_scenario
    from titanflow.record.history import row_from_summary

    with prefect_test_harness(server_startup_timeout=90):
        nan = qwen3_scenario(steps=4, lr=1e6, runs_dir=str(tmp_path), run_id="nan", return_state=True)
        slow = qwen3_scenario(steps=3, timeout_s=8, runs_dir=str(tmp_path), run_id="slow", return_state=True)
        counts = {"nan": train_run_count(nan.state_details.flow_run_id),
                  "slow": train_run_count(slow.state_details.flow_run_id)}
    assert nan.is_failed() and slow.is_failed()
    nan_row, slow_row = (row_from_summary(tmp_path / name / "summary.json") for name in ("nan", "slow"))
    assert (nan_row.failed_task, nan_row.failure_class) == ("train", "numerics")
    assert (slow_row.failed_task, slow_row.failure_class) == ("train", "infrastructure")
    assert counts == {"nan": 1, "slow": 3}
    # the killed run keeps its logs and publishes nothing half-written
    slow_dir = tmp_path / "slow"
    assert "timed out after 8 s" in slow_row.error
    assert "killed after the 8 s timeout" in (slow_dir / "train.log").read_text()
    assert not (slow_dir / "export").exists()


#: Steps of the run to cancel: long enough to be training (about 3 s a step on 2 shared cores, measured)
#: when the cancel comes after 2 logged steps, short enough to end on its own if the cancel went astray.
CANCEL_STEPS = 40
#: Seconds from the cancel request until no process of the run may remain: Prefect's runner hears the
#: cancel at once (the events websocket) and sends the flow-run process SIGTERM; the launch then
#: ends its ranks with SIGTERM, SIGKILL after titanflow.launch.process.KILL_GRACE_S (10 s), gone
#: within KILL_WAIT_S (5 s) more: 15 s at worst, and 6.5 s measured by the user who reported the issue.
RANKS_GONE_S = 20.0


def test_a_deployment_run_cancelled_while_training_ends_its_ranks_and_is_recorded_cancelled(deployed, tmp_path):
    """`prefect flow-run cancel` (Cancelling through the client API) of a deployment run after 2 logged
    steps: no process of the run is left within RANKS_GONE_S, the flow run ends Cancelled, summary.json
    says cancelled in train with the losses of the steps logged (metrics.csv's), the history row says
    cancelled with no failure class, the rows already there are untouched, and train.log is kept."""
    from helpers import FIXTURES
    from helpers.deployment_runs import PASS_DEPLOYMENT, run_deployment
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.states import Cancelling

    from titanflow.launch.metrics import logged_losses
    from titanflow.record import history
    from titanflow.record.summary import read_summary

    # an earlier run in the history (the worker appends to the same table: TITANFLOW_HISTORY, tests/conftest.py)
    shutil.copytree(FIXTURES / "run_folders" / "native-cpu-nan", tmp_path / "earlier")
    history.append_run(tmp_path / "earlier" / "summary.json")
    before = history.read_history()
    run_dir = tmp_path / "runs" / "deploy-cancel"

    started = run_deployment(deployed.api_url, PASS_DEPLOYMENT, f"steps={CANCEL_STEPS}", "run_id=deploy-cancel",
                             f"runs_dir={run_dir.parent}", watch=False)
    assert started.returncode == 0 and started.flow_run_id, started.output
    deadline = time.monotonic() + 300  # worker pick-up, weights, render, torchrun start: ~40-60 s measured
    while len(logged_steps(run_dir / "train.log")) < 2:
        assert time.monotonic() < deadline, f"no 2 steps logged in {run_dir / 'train.log'} within 300 s"
        time.sleep(0.5)
    training = run_processes(run_dir)
    assert len(training) >= 3, training  # torchrun and its 2 ranks

    with SyncPrefectClient(deployed.api_url) as client:
        asked = time.monotonic()
        client.set_flow_run_state(started.flow_run_id, Cancelling(message="cancelled by the test"))
        while run_processes(run_dir) and time.monotonic() - asked < 60:
            time.sleep(0.2)
        gone_s = time.monotonic() - asked
        left = run_processes(run_dir)
        while not client.read_flow_run(started.flow_run_id).state.is_final() and time.monotonic() - asked < 120:
            time.sleep(0.5)
        state = client.read_flow_run(started.flow_run_id).state
    print(f"\ncancel: processes of the run gone {gone_s:.1f} s after the request, "
          f"flow run {state.name} after {time.monotonic() - asked:.1f} s")
    assert not left, f"left running {time.monotonic() - asked:.0f} s after the cancel: {left}"
    assert gone_s <= RANKS_GONE_S
    assert state.is_cancelled(), state

    summary = read_summary(run_dir / "summary.json")
    logged = logged_losses(run_dir / "metrics.csv")
    # metrics.csv holds the event files' float32 values where their writer flushed every step, else the console's
    # (summary.train.metrics_source says which); the console line rounds each to 5 decimals
    assert len(logged) >= 2 and [round(x, 5) for x in logged] == [row["loss"] for row in logged_steps(
        run_dir / "train.log")]
    assert (summary.verdict, summary.cancelled.task, summary.cancelled.losses) == ("cancelled", "train", logged)
    assert summary.cancelled.cause.startswith("cancelled (SIGTERM")
    assert (summary.failed_task, summary.error, summary.export) == (None, None, None)

    table = history.read_history()
    row = table[table.run_id == "deploy-cancel"]
    assert len(row) == 1 and row.verdict.iloc[0] == "cancelled" and row.failure_class.isna().all()
    assert list(row.losses.iloc[0]) == logged
    assert changed_history_cells(before, table) == {}  # earlier rows untouched
    assert (run_dir / "train.log").stat().st_size and any((run_dir / "train" / "ranks").rglob("*"))
