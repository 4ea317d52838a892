"""The ``qwen3-scenario`` flow: one scenario, from weights to a judged loss.

    pull_weights [-> trim_weights] -> render_config -> compile_warmup -> train -> export -> validate
    -> compare_loss -> compare_history -> append_history -> report

Parameters left ``None`` take :class:`titanflow.params.ScenarioRun`'s defaults;
the resolved parameters are logged and written to ``summary.json`` as the run starts. Bad
parameters fail here, before any task runs. ``resume`` continues a failed, cancelled or killed run
in its own folder, and a retried flow run continues the folder it made (titanflow.run.resume); the
tasks before training answer from Prefect's cache when nothing that decides them changed
(titanflow.prefect_ops.caching), and the summary names those that did. Rendering, the compile warm-up and
training hold this node's slot of a Prefect concurrency limit (titanflow.prefect_ops.slot),
so no other run's training slows them down; a run on Slurm trains holding its nodes' slots instead
(the train task), this node's freed once it is rendered. Every run, passed or failed,
is judged against the run history, appended to it and reported; the verdict is
decided by titanflow.judge.verdict. A run cancelled in Prefect (the worker's SIGTERM) or
interrupted (Ctrl-C) stops training at once and is recorded, appended and reported the same way,
with verdict ``cancelled`` and the steps it logged, before the flow run ends Cancelled (after Ctrl-C,
Prefect's Crashed turned Cancelled: titanflow.prefect_ops.stopped). The flow only wires tasks and records what
they return in the run's :class:`~titanflow.record.summary.RunSummary`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from prefect import flow
from prefect.logging import get_run_logger

from titan_cfg.job import ExportDtype, Init, ModelSpecSource
from titan_cfg.scenarios import SCENARIOS
from titanflow.export.imports import import_ahead, modules_for
from titanflow.params import ScenarioName, TargetName, Trim
from titanflow.paths import DiskFull
from titanflow.prefect_ops.stopped import cancelled_not_crashed
from titanflow.record.history import history_file
from titanflow.run.recorder import RunRecorder
from titanflow.run.session import scenario_session
from titanflow.task_names import TaskName
from titanflow.tasks.export import export
from titanflow.tasks.history import append_history, compare_history
from titanflow.tasks.judge import compare_loss
from titanflow.tasks.render import render_config
from titanflow.tasks.report import report
from titanflow.tasks.train import train
from titanflow.tasks.trim import trim_weights
from titanflow.tasks.validate import validate
from titanflow.tasks.warmup import compile_warmup
from titanflow.tasks.weights import pull_weights
from titanflow.weights.digest import weights_digest


class RecordNotWritten(DiskFull):
    """summary.json could not be written for a full disk; the message says the run's verdict and where its record is."""


def write_record(record: RunRecorder) -> Path:
    """``record.write()``; a run folder too full for summary.json even after its reserve (titanflow.paths.DiskFull):
    the history row and the flow run's state carry the record instead.

    Raises:
        RecordNotWritten: summary.json could not be written; the message says the verdict and where the record went."""
    try:
        return record.write()
    except DiskFull as err:
        try:
            append_history(str(record.path), record.summary)
            kept = f"its record is in the history ({history_file()})"
        except Exception as lost:  # noqa: BLE001 - said in the error raised, which is the run's outcome
            kept = f"the history could not take its record either ({type(lost).__name__}: {lost})"
        raise RecordNotWritten(err.errno, f"{err.strerror}; the run ended {record.summary.verdict}: "
                                          f"{record.summary.reason}; {kept}, not {record.path}") from err


def judge_against_history(record: RunRecorder) -> Path:
    """Write summary.json, compare the run with the history, append it, publish the report; returns
    the summary's path. A broken history store is recorded (``history_error``), logged and reported,
    never allowed to hide the run's own outcome.

    Raises:
        RecordNotWritten: summary.json could not be written (:func:`write_record`)."""
    summary_path = write_record(record)
    comparison = None
    try:
        comparison = compare_history(str(summary_path))
        record.summary.findings = comparison.findings
        summary_path = write_record(record)
        append_history(str(summary_path))
    except RecordNotWritten:
        raise
    except Exception as err:  # noqa: BLE001 - the history is secondary to the run's own result: said, not raised
        record.summary.history_error = f"{type(err).__name__}: {err}"
        get_run_logger().error("history: %s", record.summary.history_error)
        summary_path = write_record(record)
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
    from_step_1: bool | None = None,
) -> dict:
    """Run one Qwen3 scenario; returns the summary (``runs/<id>/summary.json``) as a dict, plus its path
    under ``summary``.

    Raises:
        on bad parameters before any task; otherwise the failing task's error,
        after summary.json names that task; a cancel (TerminationSignal, KeyboardInterrupt) after
        summary.json records it.
    """
    with scenario_session(
            judge_against_history, scenario=scenario, target=target, init=init, weights=weights, trim=trim,
            model_spec=model_spec, steps=steps, checkpoint_interval=checkpoint_interval,
            global_batch_size=global_batch_size, seq_len=seq_len, nnodes=nnodes, nproc_per_node=nproc_per_node,
            scheduler=scheduler, lr=lr, warmup_steps=warmup_steps, seed=seed, export_dtype=export_dtype,
            compile=compile, kernels=kernels, timeout_s=timeout_s, runs_dir=runs_dir, run_id=run_id,
            resume=resume, from_step_1=from_step_1) as session:
        run, summary, model_type = session.run, session.summary, SCENARIOS[session.run.scenario].model_type
        embedded_pretrained = run.init == "pretrained" and run.weights is None  # pretrains the embedded checkpoint
        with session.task(pull_weights, holds_node=embedded_pretrained):
            weights_dir = session.call(pull_weights, run.weights, run.init, model_type)
            if run.init == "pretrained" and run.trim is None:  # names the checkpoint loaded, whichever machine built it
                summary.weights_digest = weights_digest(Path(weights_dir))
        if run.trim is not None:  # moe on trn2: the published weights, trimmed (cached after the first run)
            with session.task(trim_weights):
                weights_dir = trim_weights(run.weights, weights_dir, run.trim, run.init)
                if run.init == "pretrained":
                    summary.weights_digest = weights_digest(Path(weights_dir))
        with session.task(render_config, holds_node=True):  # builds torchtitan's config: compute, like training
            session.check_resumed_job(weights_dir)
            rendered = session.call(render_config, run, weights_dir, str(session.run_dir))
            summary.dataset = rendered.dataset
        with session.task(compile_warmup):
            summary.compile_warmup = session.call(compile_warmup, rendered, run.timeout_s)
            if TaskName.compile_warmup in summary.cached_tasks:  # it compiled nothing this time
                summary.compile_warmup = summary.compile_warmup.from_cache()
        import_ahead(modules_for(SCENARIOS[run.scenario].round_trip))  # validate's, while training runs
        with session.task(train):
            session.training_on(rendered.scheduler)
            summary.train = session.call(train, rendered, run.timeout_s)
        session.training_done()
        with session.task(export):
            summary.export = export(rendered.job_path, str(session.run_dir))
        with session.task(validate):
            summary.validation = validate(summary.export.export_dir, rendered.job_path, run.tolerances)
            summary.validation.raise_for_problems()
        with session.task(compare_loss):
            summary.loss = compare_loss(summary.train.losses, rendered.job_path, run, summary.environment,
                                        (summary.stack or {}).get("digest"))
    return session.result()
