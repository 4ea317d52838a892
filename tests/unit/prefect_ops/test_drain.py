"""titanflow.prefect_ops.drain on a real Prefect server: an event this process queued is on the server once
send_buffered returns (the server stores it within seconds after), and a log record of a flow run is there when it
returns. Fails when Prefect moves what the events half relies on (an undocumented call, named in the module)."""

from __future__ import annotations

import time
import uuid

from titanflow.prefect_ops.drain import send_buffered


def test_what_this_process_queued_reaches_the_server(prefect_api):
    from prefect import flow, get_run_logger
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.events import emit_event
    from prefect.events.filters import EventFilter, EventNameFilter
    from prefect.settings import PREFECT_API_URL, temporary_settings

    name = f"titanflow.test.drain-{uuid.uuid4().hex[:8]}"
    marker = f"drained-{uuid.uuid4().hex[:8]}"

    @flow(name="drained")
    def logs_once() -> str:
        get_run_logger().info(marker)
        from prefect import runtime

        return str(runtime.flow_run.id)

    with temporary_settings({PREFECT_API_URL: prefect_api}):
        flow_run_id = logs_once()
        assert emit_event(name, resource={"prefect.resource.id": f"titanflow.test.{marker}"}) is not None
        send_buffered()
        with SyncPrefectClient(prefect_api) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            assert marker in [log.message for log in logs]
            deadline = time.monotonic() + 30  # the server's event persister writes in batches, every few seconds
            while not client.read_events(EventFilter(event=EventNameFilter(name=[name])), limit=50).events:
                assert time.monotonic() < deadline, f"event {name} not on the server 30 s after send_buffered"
                time.sleep(0.5)


def test_the_undocumented_call_is_where_the_module_says():
    """drain.py's one undocumented call, as checked on Prefect 3.9.0 and 3.9.1: ``EventsWorker.drain_all(timeout=...)``,
    which events' worker inherits from Prefect's internal queue service and Prefect's API reference does not list.
    Fails at once, with no server, when it moves."""
    import inspect

    from prefect.events.worker import EventsWorker

    assert list(inspect.signature(EventsWorker.drain_all).parameters)[:1] == ["timeout"]
