"""The recorder the flow fills: :class:`RunRecorder` times each task as the flow calls it, records a failed task and
its error, or a cancel (titanflow.prefect_ops.stopped.cancel_cause) as a :class:`~titanflow.record.summary.Cancellation`,
and writes the run record (titanflow.record.summary.RunSummary, ``runs/<id>/summary.json``) with its verdict
(titanflow.judge.verdict). A task's start and end are told on titanflow.task_names.PHASE_LOGGER.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from pathlib import Path

from titanflow.judge.verdict import final_verdict
from titanflow.launch.metrics import logged_losses
from titanflow.paths import RESERVE, reserve_space, write_atomic
from titanflow.prefect_ops.stopped import cancel_cause
from titanflow.record.summary import SUMMARY, Cancellation, RunSummary
from titanflow.run.peak_rss import peak_rss_bytes, reset_peak_rss
from titanflow.task_names import PHASE_LOGGER, TaskName


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class TaskTiming:
    """The timing of one task block: seconds spent waiting inside it are recorded apart."""

    def __init__(self, summary: RunSummary):
        self.summary = summary
        self.waited_s = 0.0

    def exclude_wait(self, seconds: float) -> None:
        """``seconds`` of this block were a wait for the training slot: count them in ``slot_wait_s``, not the task."""
        self.waited_s += seconds
        self.summary.slot_wait_s = round(self.summary.slot_wait_s + seconds, 3)


class RunRecorder:
    """Fills one :class:`RunSummary` as the flow runs its tasks, and writes it."""

    def __init__(self, run_dir: Path, summary: RunSummary):
        self.run_dir = run_dir
        self.summary = summary.model_copy(update={"started_at": summary.started_at or _now()})
        self._reserved = False

    @property
    def path(self) -> Path:
        """``run_dir/summary.json``."""
        return self.run_dir / SUMMARY

    @contextlib.contextmanager
    def task(self, task) -> Iterator[TaskTiming]:
        """Time the block as the Prefect task ``task`` (its ``name``); on an exception record it (a
        cancel as :meth:`cancelled_by`, anything else as the failed task and its error) and re-raise
        (the flow writes the summary in its ``finally``). Yields a :class:`TaskTiming` whose
        ``exclude_wait`` takes a wait for the training slot out of the task's time. The start and the end are
        told on :data:`PHASE_LOGGER`. The task's peak resident set goes to ``task_peak_rss_bytes``
        (titanflow.run.peak_rss)."""
        start = time.monotonic()
        timing = TaskTiming(self.summary)
        PHASE_LOGGER.info("%s started", task.name, extra={"phase": task.name, "phase_state": "started"})
        state = "completed"
        measured = reset_peak_rss()
        try:
            yield timing
        except BaseException as err:
            state = "cancelled"
            if not self.cancelled_by(err, TaskName(task.name)):
                self.summary.failed_task = TaskName(task.name)
                self.summary.error = f"{type(err).__name__}: {err}"
                state = "failed"
            raise
        finally:
            seconds = self.summary.timings_s[task.name] = round(time.monotonic() - start - timing.waited_s, 3)
            peak = peak_rss_bytes() if measured else None
            if peak is not None:
                self.summary.task_peak_rss_bytes[task.name] = peak
            if state == "completed" and task.name in self.summary.cached_tasks:
                state = "cached"
            PHASE_LOGGER.info("%s %s in %.1f s", task.name, state, seconds,
                              extra={"phase": task.name, "phase_state": state, "phase_s": seconds})

    def cancelled_by(self, err: BaseException, task: TaskName | None = None) -> bool:
        """Whether ``err`` is a cancel (:func:`cancel_cause`); if so, and none is recorded yet, record it
        as the run's :class:`Cancellation` in ``task`` (None: between tasks) with the losses of the
        steps in the run folder's metrics.csv (training, stopped, has written it by then)."""
        cause = cancel_cause(err)
        if cause is not None and self.summary.cancelled is None:
            self.summary.cancelled = Cancellation(cause=cause, task=task,
                                                  losses=logged_losses(self.run_dir / "metrics.csv"))
        return cause is not None

    def write(self) -> Path:
        """Decide the verdict from the parts recorded so far (titanflow.judge.verdict), then write
        ``run_dir/summary.json`` atomically; returns its path. The first write also keeps the run folder's space
        reserve (titanflow.paths.reserve_space), which a full disk gives up for the record and the curve.

        Raises:
            titanflow.paths.DiskFull: the record cannot be written, its reserve spent.
        """
        if not self._reserved:
            reserve_space(self.run_dir)
            self._reserved = True
        cancelled = self.summary.cancelled.reason if self.summary.cancelled else None
        self.summary.verdict, self.summary.reason = final_verdict(self.summary.failed_task, self.summary.loss,
                                                                  self.summary.findings, cancelled)
        self.summary.finished_at = _now()
        return write_atomic(self.path, self.summary.model_dump_json(indent=2) + "\n", what="the run record")

    def release_reserve(self) -> None:
        """The run is recorded: give its folder's space reserve back (titanflow.paths.RESERVE)."""
        (self.run_dir / RESERVE).unlink(missing_ok=True)
