"""A flow run stopped from outside ends Cancelled in Prefect, as titanflow records it.

Prefect's engine sets a flow run Crashed for every exception that is not one of its code's: Ctrl-C
(``KeyboardInterrupt``), and a SIGTERM that is not a Prefect cancel (``TerminationSignal``: a ``kill``, a node's
shutdown). titanflow records such a run as ``cancelled`` in its summary, history and report
(titanflow.run.summary.cancel_cause), and :func:`cancelled_not_crashed`, an ``on_crashed`` hook of every titanflow
flow, sets its flow run Cancelled too, the cause as the state's message, so that the Prefect UI says what the
history says. A crash of any other cause (``SystemExit``, the API unreachable, the process killed outright, which
runs no hook) stays Crashed. A Prefect cancel (the UI, ``prefect flow-run cancel``) is Prefect's own
cancellation and never reaches the hook. The task run that was running when the stop came (``train``, mostly) keeps
Prefect's Crashed: its states reach the server as the flow process's events, recorded after the hook has run, so
setting it here could be undone by its own late event; the flow run and titanflow's records say cancelled.
"""

from __future__ import annotations

from titanflow.run.summary import cancel_cause


def cancelled_not_crashed(flow, flow_run, state) -> None:
    """Prefect ``on_crashed`` hook: the flow run set Cancelled (forced over Crashed) when what crashed it is a stop
    from outside (:func:`titanflow.run.summary.cancel_cause`); nothing otherwise. Prefect's engine gives the hook
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
    flow_run_logger(flow_run, flow).info("flow run set Cancelled, not Crashed: %s; titanflow records it cancelled",
                                         cause)
