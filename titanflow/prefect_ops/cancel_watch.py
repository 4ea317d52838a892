"""A cancel reaches the run's process whatever became of the worker that started it.

Prefect's worker (and ``flow.serve``'s runner) stops a flow run set Cancelling by sending its process SIGTERM. Its
watch for Cancelling (Prefect 3.9: the events websocket, polls while the websocket is down) gives up when its polls
fail, as they do while the server restarts ("flow run cancellation will fail" in its log), and comes back only at the
worker's next sync with the server: a run cancelled in between trains on (measured: still training 45 s after the
request). A run started by ``titanflow run`` has no worker at all.

:func:`watching_for_cancel` asks the run's own server (its thread runs in a copy of the caller's context, so it has
the run's settings) for the state of the process's root flow run every :data:`POLL_S` seconds, through the public
client, and keeps asking through a server that does not answer. Once the server says Cancelling, it sends this
process SIGTERM, as the worker does, so the launch ends its ranks and the run is recorded cancelled the same way
(titanflow.prefect_ops.stopped):

- a run of no deployment (``titanflow run``): at once, nothing else will stop it;
- a deployment's run: after :data:`SUPERVISOR_GRACE_S` seconds of Cancelling, by when a process its worker signalled
  at once has gone (the worker kills it 30 s after its SIGTERM), so a listening worker's cancel comes first and no
  second SIGTERM cuts its stop short. Prefect's SIGTERM handler is left as it is (its runner checks it by identity).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
from collections.abc import Iterator

#: Seconds between two reads of the root flow run's state (one small API call each).
POLL_S = 5.0
#: Seconds a deployment's run may stay Cancelling before the watch stops it itself: longer than the 30 s from the
#: worker's SIGTERM to its SIGKILL (prefect.runner's process manager, Prefect 3.9), so a process the worker signalled at
#: once (the events websocket) is gone by then, plus a margin. A worker whose websocket is down polls every
#: PREFECT_WORKER_CANCELLATION_POLL_SECONDS (120 s by default): the watch comes first then.
SUPERVISOR_GRACE_S = 45.0

_watching: contextvars.ContextVar[bool] = contextvars.ContextVar("titanflow_cancel_watch", default=False)
#: Set once a watch of this process has sent it SIGTERM: the stop is then known to be a Prefect cancel.
SENT_SIGTERM = threading.Event()


def stop_after_s(state, deployment_id, cancelling_s: float) -> float | None:
    """Seconds left before the watch stops the process (0: now), or None when ``state`` is not Cancelling.

    ``state``: the root flow run's state (None before it has one); ``deployment_id``: the root flow run's (None for a
    run of no deployment); ``cancelling_s``: seconds since the watch first read Cancelling."""
    if state is None or not state.is_cancelling():
        return None
    grace = SUPERVISOR_GRACE_S if deployment_id is not None else 0.0
    return max(0.0, grace - cancelling_s)


@contextlib.contextmanager
def watching_for_cancel() -> Iterator[None]:
    """Watch the process's root flow run for Cancelling while the block runs (module docstring); a no-op inside
    another watch, and outside a flow run."""
    from prefect import runtime

    if _watching.get() or runtime.flow_run.id is None:
        yield
        return
    token = _watching.set(True)
    done = threading.Event()
    # the caller's context: Prefect's settings (the run's own API URL) and its run context go with the thread
    thread = threading.Thread(target=contextvars.copy_context().run, args=(_watch, done), daemon=True,
                              name="titanflow-cancel-watch")
    thread.start()
    try:
        yield
    finally:
        done.set()
        _watching.reset(token)


def _watch(done: threading.Event) -> None:
    """The watch's thread: poll until ``done`` or until it has sent the process SIGTERM."""
    from prefect import runtime
    from prefect.client.orchestration import get_client
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    root, since, unreachable = None, None, False
    with get_client(sync_client=True) as client:
        while not done.wait(POLL_S):
            try:
                root = root or runtime.flow_run.root_flow_run_id
                flow_run = client.read_flow_run(root)
            except Exception as err:  # noqa: BLE001 - a server restarting: ask again, as the worker's watch does not
                if not unreachable:
                    logger.warning("cancel watch: the Prefect server did not answer (%s: %s); asking again every %.0f s",
                                   type(err).__name__, err, POLL_S)
                unreachable = True
                continue
            if unreachable:
                logger.info("cancel watch: the Prefect server answers again")
                unreachable = False
            since = (since or time.monotonic()) if flow_run.state is not None and flow_run.state.is_cancelling() else None
            left = stop_after_s(flow_run.state, flow_run.deployment_id, time.monotonic() - since if since else 0.0)
            if left is None or left > 0 or done.is_set():
                continue
            why = ("its worker has not stopped it (a worker's cancellation watch gives up while the server is away)"
                   if flow_run.deployment_id is not None else "no worker runs it")
            logger.warning("flow run %s has been Cancelling for %.0f s and %s: stopping this process as a worker would "
                           "(SIGTERM)", root, time.monotonic() - since, why)
            SENT_SIGTERM.set()
            os.kill(os.getpid(), signal.SIGTERM)
            return
