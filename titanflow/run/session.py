"""One scenario run as the ``qwen3-scenario`` flow runs it: the bookkeeping around its tasks, in one place.

    with scenario_session(on_end=judge_against_history, scenario="native", target="cpu", ...) as session:
        with session.task(pull_weights, holds_node=True):
            weights_dir = session.call(pull_weights, ...)
        ...
    return session.result()

:func:`scenario_session` checks the parameters (titanflow.run.preflight) and creates ``runs/<run-id>/``, or, with
``resume`` or in a retried flow run, continues a run in its own folder (titanflow.run.resume); it starts the run
record (titanflow.run.recorder, summary.json written at once, so a run killed before its end keeps its parameters),
and at the end, passed, failed or cancelled, hands the record to ``on_end`` (the flow's history and report tasks).
Inside, a :class:`ScenarioSession` times each task into the record (:meth:`ScenarioSession.task`), names the tasks
whose result Prefect's cache gave (:meth:`ScenarioSession.call`, titanflow.prefect_ops.caching), and holds this node's
training slot (titanflow.prefect_ops.slot) from the first task that computes to training's end, the wait recorded apart
from every task's time; and a cancel of the flow run reaches it also when its worker no longer watches
(titanflow.prefect_ops.cancel_watch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from prefect import runtime
from prefect.logging import get_run_logger

from titanflow import paths
from titanflow.judge.environment import installed_stack, numerics_environment
from titanflow.prefect_ops.slot import HeldSlot, training_slot
from titanflow.params import ScenarioRun
from titanflow.prefect_ops.cancel_watch import watching_for_cancel
from titanflow.record.summary import RunSummary
from titanflow.report.artifacts import artifact_key, waiting_progress
from titanflow.run.preflight import preflight
from titanflow.run.recorder import RunRecorder, TaskTiming
from titanflow.run.resume import Resumption, end_previous_flow_run, own_run_folder, resumed_run


def prepare(given: dict) -> tuple[ScenarioRun, Path, Resumption | None]:
    """Validate the flow's parameters (``given``: those not None; titanflow.run.preflight) and create
    ``runs/<run-id>/``; nothing else is written. With ``resume``, or in a retried flow run whose earlier attempt made
    a run folder, the run to continue instead, checked (titanflow.run.resume.resumed_run); nothing is created then.

    Raises:
        pydantic.ValidationError / ValueError: a bad field (the message names it), or a run folder of the same id that
            another run made between the preflight and this (run_id).
    """
    if "resume" not in given and (runtime.flow_run.run_count or 1) > 1:
        folder = own_run_folder(ScenarioRun.model_validate(given), str(runtime.flow_run.id))
        if folder is not None:
            given = given | {"resume": folder.name, "runs_dir": str(folder.parent)}
    if "resume" in given:
        resumption = resumed_run(given)
        return resumption.run, resumption.run_dir, resumption
    run = ScenarioRun.model_validate(given)
    run_dir = preflight(run)
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:  # another run of the same id made it since preflight looked: that run's, left alone
        raise ValueError(f"run_id: {run_dir} was made by another run a moment ago; fix: pass another run id, or none "
                         "for a fresh one") from None
    return run, run_dir, None


class ScenarioSession:
    """The run's parameters, folder and record while the flow runs its tasks, and this node's training slot."""

    def __init__(self, run: ScenarioRun, run_dir: Path, record: RunRecorder, resumption: Resumption | None):
        self.run, self.run_dir, self.record, self.resumption = run, run_dir, record, resumption
        self.summary_path: Path | None = None
        self._node = contextlib.ExitStack()  # the slot, held from the first task that computes to training's end
        self._held: HeldSlot | None = None

    @property
    def summary(self) -> RunSummary:
        """The record being filled (written as ``summary.json``)."""
        return self.record.summary

    def call(self, task, *args):
        """``task(*args)``'s result; one that Prefect's cache gave is named in the summary's ``cached_tasks``."""
        state = task(*args, return_state=True)
        if state.name == "Cached":
            self.summary.cached_tasks.append(task.name)
        return state.result()

    @contextlib.contextmanager
    def task(self, task, *, holds_node: bool = False) -> Iterator[TaskTiming]:
        """Time the block as ``task`` in the record (titanflow.run.recorder.RunRecorder.task); ``holds_node``: it
        computes, so it takes the node's training slot first unless held, the wait recorded apart."""
        with self.record.task(task) as timing:
            if holds_node and self._held is None:
                on_wait = waiting_progress(artifact_key(self.run.model_dump()), self.run_dir.name)
                self._held = self._node.enter_context(training_slot(run_id=self.run_dir.name, on_wait=on_wait))
                timing.exclude_wait(self._held.waited_s)
            yield timing

    def check_resumed_job(self, weights_dir: str) -> None:
        """A resumed run renders the same job as before, checked before its files are written again
        (titanflow.run.resume.Resumption.check_job); nothing for a new run."""
        if self.resumption:
            self.resumption.check_job(Path(weights_dir), self.summary.weights_digest)

    def training_on(self, scheduler: str) -> None:
        """Training starts: a run on Slurm trains on its nodes, whose slots the train task takes, so this node's is
        freed; any other keeps it to training's end (:meth:`training_done`)."""
        if scheduler == "slurm":
            self._node.close()
        else:
            get_run_logger().info("holding the training slot %s", self._held.name)

    def training_done(self) -> None:
        """Training ended: this node's slot is freed for the next run (export and validation do not hold it)."""
        self._node.close()

    def result(self) -> dict:
        """The summary as a dict, plus its path under ``summary``.

        Raises:
            RuntimeError: the verdict is not pass (its reason and the summary's path).
        """
        if self.summary.verdict != "pass":
            raise RuntimeError(f"verdict fail: {self.summary.reason}; see {self.summary_path}")
        return self.summary.model_dump(mode="json") | {"summary": str(self.summary_path)}


def _start(given: dict) -> ScenarioSession:
    """The session of the run ``given`` asks for: checked, its folder made or continued, its record written."""
    run, run_dir, resumption = prepare(given)
    logger = get_run_logger()
    logger.info("run %s with %s", run_dir.name, run.model_dump_json())
    logger.info("kernels: %s", run.kernels_resolved)
    flow_run_id = str(runtime.flow_run.id)
    resumed = [*resumption.previous.resumed, resumption.continuation(flow_run_id)] if resumption else []
    record = RunRecorder(run_dir, RunSummary(
        run_id=run_dir.name, flow_run_id=flow_run_id, scenario=run.scenario, target=run.target,
        init=run.init, steps=run.steps, kernels=run.kernels_resolved, parameters=run.model_dump(),
        environment=numerics_environment(paths.cache_root()), stack=installed_stack(), resumed=resumed))
    record.write()  # from the start: a run killed before its end keeps its parameters, to be resumed
    if resumption and end_previous_flow_run(resumption.previous.flow_run_id, flow_run_id):
        logger.info("flow run %s of the resumed run set Crashed: its processes are gone (its training slot is "
                    "free)", resumption.previous.flow_run_id)
    if resumption:
        logger.info("resuming run %s (time %d; it ended %s) from step %s", run_dir.name, len(resumed),
                    resumed[-1].previous_verdict or "without a verdict (killed)", resumption.from_step or "1: "
                    "no complete step checkpoint")
    return ScenarioSession(run, run_dir, record, resumption)


@contextlib.contextmanager
def scenario_session(on_end: Callable[[RunRecorder], Path], **params) -> Iterator[ScenarioSession]:
    """The session of one scenario run (module docstring). ``params``: the flow's parameters by name, None meaning
    ScenarioRun's default. A cancel (Prefect's SIGTERM, Ctrl-C) between tasks is recorded as the run's cancellation
    (one inside a task is recorded by the task's block); whatever happens, the record then goes to ``on_end``, which
    returns the summary's path (:attr:`ScenarioSession.summary_path`).

    Raises:
        pydantic.ValidationError / ValueError: bad parameters, before any task; otherwise what the block raised,
            after ``on_end``.
    """
    session = _start({name: value for name, value in params.items() if value is not None})
    try:
        with watching_for_cancel(), session._node:
            yield session
    except BaseException as err:
        session.record.cancelled_by(err)
        raise
    finally:
        try:
            session.summary_path = on_end(session.record)
        finally:
            session.record.release_reserve()
