"""A flow run stopped from outside ends Cancelled in Prefect, as titanflow records it.

Prefect's engine sets a flow run Crashed for every exception that is not one of its code's: Ctrl-C
(``KeyboardInterrupt``), and a SIGTERM that is not a Prefect cancel (``TerminationSignal``: a ``kill``, a node's
shutdown). titanflow records such a run as ``cancelled`` in its summary, history and report
(:func:`cancel_cause`), and :func:`cancelled_not_crashed`, an ``on_crashed`` hook of every titanflow
flow, sets its flow run Cancelled too, the cause as the state's message, so that the Prefect UI says what the
history says. A crash of any other cause (``SystemExit``, the API unreachable, the process killed outright, which
runs no hook) stays Crashed. A Prefect cancel (the UI, ``prefect flow-run cancel``) is Prefect's own
cancellation and never reaches the hook.

The task run the stop came in (``train``, mostly) is set Cancelled too. Its states reach the server as the flow
process's events, which the server records in the background; the hook sends what is queued, then sets every task
run of the flow run the server holds as not ended (or Crashed) Cancelled. The server keeps a task run's newest state
(its task-run recorder updates a row only with a later state timestamp), so the Crashed event recorded after the
hook cannot undo it. A task run whose start the server had not recorded yet keeps Prefect's Crashed.

A task's retry asks :func:`classify_exception`: a cancel is no failure, any other exception has its failure class.
"""

from __future__ import annotations

import asyncio
import signal

from prefect.exceptions import CancelledRun, TerminationSignal

from titanflow.judge.failures import classify_failure
from titanflow.prefect_ops.cancel_watch import SENT_SIGTERM
from titanflow.prefect_ops.drain import send_buffered
from titanflow.results import FailureClass
from titanflow.terminated import Terminated


def cancel_cause(err: BaseException) -> str | None:
    """How ``err`` stopped the run from outside, or None when it is a failure of the run itself.

    Prefect's cancel: the worker (or runner) sends the flow-run process SIGTERM, which Prefect
    raises in the flow as ``prefect.exceptions.TerminationSignal`` (and the ``titanflow`` command as
    titanflow.terminated's ``Terminated`` once Prefect hands the signal on); Ctrl-C is ``KeyboardInterrupt``;
    an asyncio cancellation is ``asyncio.CancelledError`` (Prefect's own cancellation error subclasses it); reading
    the result of a cancelled run raises ``prefect.exceptions.CancelledRun``.
    """
    if isinstance(err, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(err, (TerminationSignal, Terminated)):
        try:
            name = signal.Signals(getattr(err, "signal", signal.SIGTERM)).name
        except ValueError:
            name = f"signal {err.signal}"
        if SENT_SIGTERM.is_set():  # this process's cancel watch sent it (titanflow.prefect_ops.cancel_watch)
            return f"cancelled ({name}: a Prefect cancel, the flow run set Cancelling on the server)"
        return f"cancelled ({name}: a Prefect cancel, or the process was told to stop)"
    if isinstance(err, asyncio.CancelledError):
        return "cancelled (asyncio cancellation)"
    if isinstance(err, CancelledRun):
        return f"cancelled ({err})" if str(err) else "cancelled (a Prefect run it waited on was cancelled)"
    return None


def classify_exception(task_name: str, error: BaseException) -> FailureClass | None:
    """Class of an exception raised by Prefect task ``task_name`` (its message is the log tail,
    as :class:`titanflow.launch.torchrun.TrainingError` carries it; titanflow.judge.failures.classify_failure); None
    for a cancel (:func:`cancel_cause`), which is no failure and never retried."""
    if cancel_cause(error) is not None:
        return None
    message = f"{type(error).__name__}: {error}"
    return classify_failure(verdict="fail", failed_task=task_name, error=message, losses=None) or "infrastructure"


def cancelled_not_crashed(flow, flow_run, state) -> None:
    """Prefect ``on_crashed`` hook: the flow run set Cancelled (forced over Crashed) when what crashed it is a stop
    from outside (:func:`cancel_cause`); nothing otherwise. Prefect's engine gives the hook
    the Crashed state with the exception as its data, in this process (Prefect 3.9,
    ``prefect.states.exception_to_crashed_state``). Prefect logs and swallows an error the hook raises."""
    cause = cancel_cause(state.data) if isinstance(state.data, BaseException) else None
    if cause is None:
        return
    from prefect.client.orchestration import get_client
    from prefect.logging.loggers import flow_run_logger
    from prefect.states import Cancelled

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run.id, Cancelled(message=cause), force=True)
        tasks = _stopped_task_runs(client, flow_run.id)
        for task_run in tasks:
            client.set_task_run_state(task_run.id, Cancelled(message=cause), force=True)
    flow_run_logger(flow_run, flow).info("flow run set Cancelled, not Crashed: %s; titanflow records it cancelled%s",
                                         cause, f" (task runs {', '.join(t.name for t in tasks)} too)" if tasks else "")


def _stopped_task_runs(client, flow_run_id) -> list:
    """The flow run's task runs the server holds as not ended, or Crashed, once the events this process queued (the
    task runs' states) are sent."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    send_buffered(timeout_s=5)
    stopped = [StateType.PENDING, StateType.SCHEDULED, StateType.RUNNING, StateType.CRASHED]
    return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                                 task_run_filter=TaskRunFilter(state=TaskRunFilterState(
                                     type=TaskRunFilterStateType(any_=stopped))))
