"""titanflow.prefect_ops.stopped on a real Prefect server: a flow run stopped from outside (Ctrl-C, a SIGTERM that is
not a Prefect cancel) ends Cancelled with the cause titanflow records (titanflow.prefect_ops.stopped.cancel_cause), not
Crashed; any other crash stays Crashed; every titanflow flow has the hook. The Ctrl-C of a real `titanflow run` is
tests/e2e/test_fault_runs.py."""

from __future__ import annotations

import re
import signal
import time
import uuid

import pytest
from prefect import flow
from prefect.exceptions import TerminationSignal

from titanflow.prefect_ops.stopped import cancelled_not_crashed


def _ended_state(raised: BaseException):
    """Run a flow with the hook that raises ``raised``; its flow run's state as the server has it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    name = f"stopped-{uuid.uuid4().hex[:8]}"

    @flow(name="stopped", flow_run_name=name, on_crashed=[cancelled_not_crashed])
    def stops():
        raise raised

    with pytest.raises(type(raised)):
        stops()
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
    return run.state


@pytest.mark.usefixtures("prefect_server")
def test_a_stop_from_outside_ends_cancelled_with_its_cause_and_any_other_crash_stays_crashed():
    interrupted = _ended_state(KeyboardInterrupt())
    assert (interrupted.type.value, interrupted.message) == ("CANCELLED", "interrupted (Ctrl-C)")
    # Prefect hands a TerminationSignal on to the SIGTERM handler it found (it signals its own process): a no-op here
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        terminated = _ended_state(TerminationSignal(signal.SIGTERM))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert terminated.type.value == "CANCELLED"
    assert terminated.message == "cancelled (SIGTERM: a Prefect cancel, or the process was told to stop)"
    exited = _ended_state(SystemExit(3))  # not a stop titanflow records as cancelled: Prefect's Crashed stands
    assert exited.type.value == "CRASHED" and "system exit" in exited.message


def _recorded_running(task_run_id) -> None:
    """Wait until the server has recorded the task run Running (its state comes by event, in the background)."""
    from prefect.client.orchestration import get_client
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        for _ in range(200):
            try:
                if client.read_task_run(task_run_id).state.is_running():
                    return
            except Exception:  # noqa: BLE001 - not recorded yet
                pass
            time.sleep(0.1)
    raise AssertionError(f"task run {task_run_id} never recorded Running")


@pytest.mark.usefixtures("prefect_server")
def test_the_task_run_the_stop_came_in_ends_cancelled_too_and_a_finished_one_keeps_its_state():
    from prefect import runtime, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterName
    from prefect.events.worker import EventsWorker

    name = f"stopped-{uuid.uuid4().hex[:8]}"

    @task(name="done")
    def done():
        return 1

    @task(name="training")
    def training():
        _recorded_running(runtime.task_run.id)  # as a training is, long after it started
        raise KeyboardInterrupt

    @flow(name="stopped", flow_run_name=name, on_crashed=[cancelled_not_crashed])
    def stops():
        done()
        training()

    with pytest.raises(KeyboardInterrupt):
        stops()
    EventsWorker.drain_all(timeout=10)  # whatever the flow process still queued, the task's Crashed included
    time.sleep(2)  # which the server records in the background: it must not undo the Cancelled
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        task_runs = {t.name.rsplit("-", 1)[0]: t.state
                     for t in client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))}
    assert run.state.type.value == "CANCELLED"
    assert {name: state.type.value for name, state in task_runs.items()} == {"done": "COMPLETED",
                                                                              "training": "CANCELLED"}
    assert task_runs["training"].message == "interrupted (Ctrl-C)"


def test_every_titanflow_flow_has_the_hook():
    from titanflow.flows.bisection import qwen3_bisect
    from titanflow.flows.nightly import qwen3_nightly
    from titanflow.flows.scenario import qwen3_scenario

    assert all(cancelled_not_crashed in f.on_crashed_hooks for f in (qwen3_scenario, qwen3_nightly, qwen3_bisect))


@pytest.mark.usefixtures("prefect_server")
def test_a_nightly_interrupted_in_a_scenario_run_names_that_run_in_its_log_and_ends_cancelled(monkeypatch, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    import titanflow.flows.nightly

    def interrupted_scenario(**params):  # Ctrl-C while the suite's first scenario run trains
        raise KeyboardInterrupt

    monkeypatch.setattr(titanflow.flows.nightly, "qwen3_scenario", interrupted_scenario)
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KeyboardInterrupt):
        titanflow.flows.nightly.qwen3_nightly.with_options(flow_run_name=name)(
            target="cpu", scenarios=["native", "moe"], inits=["random"], runs_dir=str(tmp_path))
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        messages = [log.message for log in client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))]
    assert run.state.type.value == "CANCELLED"
    (named,) = [m for m in messages if "cancelled (interrupted (Ctrl-C))" in m]
    # the run the suite was in, by the run id it gave it (titanflow.params.new_run_id); the second never started
    assert re.fullmatch(r"native/random: cancelled \(interrupted \(Ctrl-C\)\) in run native-cpu-random-\d{8}-\d{6}-"
                        r"[0-9a-f]{4}; the suite stops at run 1 of 2", named), named
