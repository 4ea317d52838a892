"""titanflow.prefect_ops.cancel_watch: a flow run set Cancelling on the server stops its process, at once when no
deployment (no worker) runs it, after the worker's grace otherwise. The case it exists for, a worker whose own watch
gave up during a server restart, is tests/e2e/test_training_slot_runs.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

from prefect.states import Cancelled, Cancelling, Running

from titanflow.prefect_ops import cancel_watch

#: A flow of no deployment that waits inside the watch, as a scenario's session does, and says when it is in it.
FLOW = textwrap.dedent("""
    import sys, time
    from prefect import flow
    from titanflow.prefect_ops.cancel_watch import watching_for_cancel
    from titanflow.prefect_ops.stopped import cancelled_not_crashed

    @flow(name="watched", flow_run_name=sys.argv[1], on_crashed=[cancelled_not_crashed])
    def watched():
        with watching_for_cancel():
            print("watching", flush=True)
            time.sleep(120)

    watched()
""")


def test_the_grace_is_the_workers_and_only_a_deployments_run_gets_it():
    deployment = uuid.uuid4()
    assert cancel_watch.stop_after_s(Running(), None, 0) is None
    assert cancel_watch.stop_after_s(None, deployment, 0) is None
    assert cancel_watch.stop_after_s(Cancelling(), None, 0) == 0  # no worker will stop it: now
    assert cancel_watch.stop_after_s(Cancelling(), deployment, 10) == cancel_watch.SUPERVISOR_GRACE_S - 10
    assert cancel_watch.stop_after_s(Cancelling(), deployment, 60) == 0
    assert cancel_watch.stop_after_s(Cancelled(), deployment, 60) is None  # ended: nothing to stop
    # longer than the worker's 30 s from its SIGTERM to its SIGKILL (Prefect 3.9's process manager)
    assert cancel_watch.SUPERVISOR_GRACE_S > 30


def test_a_run_of_no_deployment_set_cancelling_is_stopped_and_ends_cancelled(prefect_api, tmp_path):
    """The flow above in its own process on the session's server: set Cancelling while it sleeps, it is stopped within
    POLL_S and the SIGTERM's handling (the hook sets it Cancelled with the cause titanflow records)."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    name = f"watched-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "watched.py"
    script.write_text(FLOW)
    proc = subprocess.Popen([sys.executable, str(script), name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PREFECT_API_URL": prefect_api})
    try:
        seen = []
        while (line := proc.stdout.readline()) and line.strip() != "watching":  # Prefect's own lines come first
            seen.append(line)
        assert line, "".join(seen)[-3000:]
        with SyncPrefectClient(prefect_api) as client:
            (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
            asked = time.monotonic()
            client.set_flow_run_state(run.id, Cancelling(message="cancelled by the test"))
            output = proc.communicate(timeout=60)[0]
            stopped_s = time.monotonic() - asked
            state = client.read_flow_run(run.id).state
    finally:
        if proc.poll() is None:
            proc.kill()
    assert stopped_s < cancel_watch.POLL_S + 15, output[-3000:]
    assert state.is_cancelled(), (state, output[-3000:])
    assert state.message == "cancelled (SIGTERM: a Prefect cancel, the flow run set Cancelling on the server)"
    assert "has been Cancelling for 0 s and no worker runs it: stopping this process" in output
