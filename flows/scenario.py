"""The ``qwen3-scenario`` flow: one scenario, from weights to a judged loss.

    pull_weights [-> trim_weights] -> render_config -> compile_warmup -> train -> export -> validate
    -> compare_loss -> compare_history -> append_history -> report

Parameters left ``None`` take :class:`titanflow.run.params.ScenarioRun`'s defaults;
the resolved parameters are logged and written to ``summary.json`` as the run starts. Bad
parameters fail here, before any task runs. ``resume`` continues a failed, cancelled or killed run
in its own folder, and a retried flow run continues the folder it made (titanflow.run.resume); the
tasks before training answer from Prefect's cache when nothing that decides them changed
(titanflow.prefect_ops.caching), and the summary names those that did. Rendering, the compile warm-up and
training hold this node's slot of a Prefect concurrency limit (titanflow.launch.slot),
so no other run's training slows them down; a run on Slurm trains holding its nodes' slots instead
(the train task), this node's freed once it is rendered. Every run, passed or failed,
is judged against the run history, appended to it and reported; the verdict is
decided by titanflow.judge.verdict. A run cancelled in Prefect (the worker's SIGTERM) or
interrupted (Ctrl-C) stops training at once and is recorded, appended and reported the same way,
with verdict ``cancelled`` and the steps it logged, before the flow run ends Cancelled (after Ctrl-C,
Prefect's Crashed turned Cancelled: titanflow.prefect_ops.stopped). The flow only wires tasks and records what
they return in the run's :class:`~titanflow.run.summary.RunSummary`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal

from prefect import flow, runtime
from prefect.logging import get_run_logger

from tasks.export import export
from tasks.history import append_history, compare_history
from tasks.judge import compare_loss
from tasks.render import render_config
from tasks.report import report
from tasks.train import train
from tasks.trim import trim_weights
from tasks.validate import validate
from tasks.warmup import compile_warmup
from tasks.weights import pull_weights
from titan_cfg.job import ExportDtype, Init, ModelSpecSource
from titan_cfg.scenarios import SCENARIOS
from titanflow import paths
from titanflow.export.imports import import_ahead, modules_for
from titanflow.judge.environment import numerics_environment
from titanflow.launch.slot import training_slot
from titanflow.prefect_ops.stopped import cancelled_not_crashed
from titanflow.report.artifacts import artifact_key, waiting_progress
from titanflow.run.params import ScenarioName, ScenarioRun, TargetName, Trim
from titanflow.run.preflight import preflight
from titanflow.run.resume import Resumption, end_previous_flow_run, own_run_folder, resumed_run
from titanflow.run.summary import RunRecorder, RunSummary
from titanflow.run.task_names import TaskName
from titanflow.weights.digest import weights_digest


def prepare(params: dict) -> tuple[ScenarioRun, Path, Resumption | None]:
    """Validate parameters (titanflow.run.preflight) and create ``runs/<run-id>/``; nothing else is written.
    With ``resume``, or in a retried flow run whose earlier attempt made a run folder, the run to continue
    instead, checked (titanflow.run.resume.resumed_run); nothing is created then.

    Raises:
        pydantic.ValidationError / ValueError: a bad field (the message names it).
    """
    given = {k: v for k, v in params.items() if v is not None}
    if "resume" not in given and (runtime.flow_run.run_count or 1) > 1:
        folder = own_run_folder(ScenarioRun.model_validate(given), str(runtime.flow_run.id))
        if folder is not None:
            given |= {"resume": folder.name, "runs_dir": str(folder.parent)}
    if "resume" in given:
        resumption = resumed_run(given)
        return resumption.run, resumption.run_dir, resumption
    run = ScenarioRun.model_validate(given)
    run_dir = preflight(run)
    run_dir.mkdir(parents=True)
    return run, run_dir, None


def judge_against_history(record: RunRecorder) -> Path:
    """Write summary.json, compare the run with the history, append it, publish the report; returns
    the summary's path. A broken history store is recorded (``history_error``), logged and reported,
    never allowed to hide the run's own outcome."""
    summary_path = record.write()
    comparison = None
    try:
        comparison = compare_history(str(summary_path))
        record.summary.findings = comparison.findings
        summary_path = record.write()
        append_history(str(summary_path))
    except Exception as err:  # noqa: BLE001 - the history is secondary to the run's own result: said, not raised
        record.summary.history_error = f"{type(err).__name__}: {err}"
        get_run_logger().error("history: %s", record.summary.history_error)
        summary_path = record.write()
    report(str(summary_path), None,  # None: the run folder's metrics.csv, also after a failed training
           golden=comparison.golden if comparison else None, history=comparison.previous if comparison else None,
           findings=comparison.findings if comparison else None)
    return summary_path


@flow(name="qwen3-scenario", on_crashed=[cancelled_not_crashed])
def qwen3_scenario(
    scenario: ScenarioName | None = None,
    target: TargetName | None = None,
    init: Init | None = None,
    weights: str | None = None,
    trim: Trim | None = None,
    model_spec: ModelSpecSource | None = None,
    steps: int | None = None,
    checkpoint_interval: int | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    nnodes: int | None = None,
    nproc_per_node: int | None = None,
    scheduler: Literal["slurm", "kubernetes"] | None = None,
    lr: float | None = None,
    warmup_steps: int | None = None,
    seed: int | None = None,
    export_dtype: ExportDtype | None = None,
    compile: bool | None = None,
    kernels: dict[str, str] | None = None,
    timeout_s: float | None = None,
    runs_dir: str | None = None,
    run_id: str | None = None,
    resume: str | None = None,
) -> dict:
    """Run one Qwen3 scenario; returns the summary (``runs/<id>/summary.json``) as a dict, plus its path
    under ``summary``.

    Raises:
        on bad parameters before any task; otherwise the failing task's error,
        after summary.json names that task; a cancel (TerminationSignal, KeyboardInterrupt) after
        summary.json records it.
    """
    run, run_dir, resumption = prepare(dict(locals()))  # first line: locals() is exactly the parameters
    logger = get_run_logger()
    logger.info("run %s with %s", run_dir.name, run.model_dump_json())
    logger.info("kernels: %s", run.kernels_resolved)
    flow_run_id = str(runtime.flow_run.id)
    resumed = [*resumption.previous.resumed, resumption.continuation(flow_run_id)] if resumption else []
    record = RunRecorder(run_dir, RunSummary(
        run_id=run_dir.name, flow_run_id=flow_run_id, scenario=run.scenario, target=run.target,
        init=run.init, steps=run.steps, kernels=run.kernels_resolved, parameters=run.model_dump(),
        environment=numerics_environment(paths.cache_root()), resumed=resumed))
    summary = record.summary
    record.write()  # from the start: a run killed before its end keeps its parameters, to be resumed
    if resumption and end_previous_flow_run(resumption.previous.flow_run_id, flow_run_id):
        logger.info("flow run %s of the resumed run set Crashed: its processes are gone (its training slot is "
                    "free)", resumption.previous.flow_run_id)
    if resumption:
        logger.info("resuming run %s (time %d; it ended %s) from step %s", run_dir.name, len(resumed),
                    resumed[-1].previous_verdict or "without a verdict (killed)", resumption.from_step or "1: "
                    "no complete step checkpoint")

    def call(task, *args):
        """``task(*args)``'s result; one that Prefect's cache gave is named in the summary's ``cached_tasks``."""
        state = task(*args, return_state=True)
        if state.name == "Cached":
            summary.cached_tasks.append(task.name)
        return state.result()

    def slot():
        """The node's training slot; waiting for it is logged and shown on the progress artifact."""
        return training_slot(run_id=run_dir.name, on_wait=waiting_progress(artifact_key(run.model_dump()),
                                                                           run_dir.name))

    try:
        with contextlib.ExitStack() as node:  # the slot, held from the first task that computes to training's end
            held = None

            def hold_node(timing) -> None:
                """Take the node's slot unless held; the wait is recorded apart, never as the task's time."""
                nonlocal held
                if held is None:
                    held = node.enter_context(slot())
                    timing.exclude_wait(held.waited_s)

            with record.task(pull_weights) as timing:
                if run.init == "pretrained" and run.weights is None:  # may pretrain the embedded checkpoint
                    hold_node(timing)
                weights_dir = call(pull_weights, run.weights, run.init, SCENARIOS[run.scenario].model_type)
                if run.init == "pretrained" and run.trim is None:  # names the checkpoint loaded, whichever
                    summary.weights_digest = weights_digest(Path(weights_dir))  # machine built it
            if run.trim is not None:  # moe on trn2: the published weights, trimmed (cached after the first run)
                with record.task(trim_weights):
                    weights_dir = trim_weights(run.weights, weights_dir, run.trim, run.init)
                    if run.init == "pretrained":
                        summary.weights_digest = weights_digest(Path(weights_dir))
            with record.task(render_config) as timing:  # builds torchtitan's config: compute, like training
                hold_node(timing)
                if resumption:  # the same job, before its files are written again
                    resumption.check_job(Path(weights_dir), summary.weights_digest)
                rendered = call(render_config, run, weights_dir, str(run_dir))
                summary.dataset = rendered.dataset
            with record.task(compile_warmup):
                summary.compile_warmup = call(compile_warmup, rendered, run.timeout_s)
                if TaskName.compile_warmup in summary.cached_tasks:  # it compiled nothing this time
                    summary.compile_warmup = summary.compile_warmup.from_cache()
            import_ahead(modules_for(SCENARIOS[run.scenario].round_trip))  # validate's, while training runs
            with record.task(train):
                if rendered.scheduler == "slurm":  # it trains on its nodes, whose slots the train task takes
                    node.close()
                else:
                    logger.info("holding the training slot %s", held.name)
                summary.train = call(train, rendered, run.timeout_s)
        with record.task(export):
            summary.export = export(rendered.job_path, str(run_dir))
        with record.task(validate):
            summary.validation = validate(summary.export.export_dir, rendered.job_path, run.tolerances)
            summary.validation.raise_for_problems()
        with record.task(compare_loss):
            summary.loss = compare_loss(summary.train.losses, rendered.job_path, run)
    except BaseException as err:
        record.cancelled_by(err)  # a cancel between tasks (record.task has recorded one inside a task)
        raise
    finally:
        summary_path = judge_against_history(record)
    if summary.verdict != "pass":
        raise RuntimeError(f"verdict fail: {summary.reason}; see {summary_path}")
    return summary.model_dump(mode="json") | {"summary": str(summary_path)}
