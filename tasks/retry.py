"""Prefect ``retry_condition_fn`` predicates, beside the tasks that declare them.

Prefect calls a predicate with the task, the task run and its Failed state; the state's
result is the raised exception. True retries the task run.
"""

from __future__ import annotations

from titanflow.prefect_ops.stopped import classify_exception
from titanflow.weights.resolve import TransientDownloadError


def _raised(state) -> BaseException | None:
    """The exception a Failed state carries, or None."""
    error = state.result(raise_on_failure=False)
    return error if isinstance(error, BaseException) else None


def retry_infrastructure_only(task, task_run, state) -> bool:
    """Retry only an infrastructure failure (titanflow.judge.failures): a numerics failure (NaN
    loss), a compile error or an export/validation problem would fail the same way again."""
    error = _raised(state)
    return error is not None and classify_exception(task.name, error) == "infrastructure"


def retry_transient_download(task, task_run, state) -> bool:
    """Retry a transient download failure only; an offline machine, a missing folder or an
    unknown repo will not fix itself."""
    return isinstance(_raised(state), TransientDownloadError)
