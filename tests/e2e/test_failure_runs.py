"""End to end on a Prefect test server: a planted NaN fails as numerics and is not retried, while a
timed-out launch is infrastructure and retried twice, its logs kept."""

import pytest

pytestmark = pytest.mark.e2e


def _train_run_count(flow_run_id) -> int:
    """How many times the flow run's train task ran, from the Prefect API (1 = no retry)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    (train,) = [t for t in task_runs if t.name.startswith("train-")]
    return train.run_count


def test_planted_nan_fails_as_numerics_once_while_a_timed_out_launch_is_retried_twice(tmp_path):
    """The flow on a Prefect test server: lr 1e6 (NaN at step 3, measured) ends the train task after one
    run; an 8 s training timeout is infrastructure and runs it 1 + 2 retries times, then fails the run
    with its logs kept."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.scenario import qwen3_scenario
    from titanflow.judge.history import row_from_summary

    with prefect_test_harness(server_startup_timeout=90):
        nan = qwen3_scenario(steps=4, lr=1e6, runs_dir=str(tmp_path), run_id="nan", return_state=True)
        slow = qwen3_scenario(steps=3, timeout_s=8, runs_dir=str(tmp_path), run_id="slow", return_state=True)
        counts = {"nan": _train_run_count(nan.state_details.flow_run_id),
                  "slow": _train_run_count(slow.state_details.flow_run_id)}
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
