"""The ``qwen3-scenario`` flow: one scenario, from weights to a judged loss.

    pull_weights -> render_config -> compile_warmup -> train -> export -> validate -> compare_loss
    -> compare_history -> append_history -> report

Parameters left ``None`` take :class:`titanflow.params.ScenarioRun`'s defaults;
the resolved parameters are logged and written to ``summary.json``. Bad
parameters fail here, before any task runs. Training holds this node's slot of a
Prefect concurrency limit (titanflow.training_slot). Every run, passed or failed,
is judged against the run history, appended to it and reported; a loss curve out
of its golden band fails the verdict (class numerics), other regressions are
flagged in the report.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal

from prefect import flow, runtime
from prefect.logging import get_run_logger

from tasks.compare import compare_loss
from tasks.config import render_config
from tasks.export import export
from tasks.history import append_history, compare_history
from tasks.report import report
from tasks.train import train
from tasks.validate import validate
from tasks.warmup import compile_warmup
from tasks.weights import pull_weights
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS
from titanflow.expectations import curve_path
from titanflow.params import ScenarioRun
from titanflow.preflight import preflight
from titanflow.summary import SUMMARY, RunRecorder
from titanflow.training_slot import training_slot


# Closed choices typed as such: the deployment's parameter schema (enforced by the server) and the
# UI's run form then refuse or offer exactly these values.
ScenarioName = Literal[tuple(SCENARIOS)]
TargetName = Literal[tuple(TARGETS)]
Init = Literal["random", "pretrained"]
ExportDtype = Literal["float32", "bfloat16", "float16"]


def prepare(params: dict) -> tuple[ScenarioRun, Path]:
    """Validate parameters (titanflow.preflight) and create ``runs/<run-id>/``; nothing else is written.

    Raises:
        pydantic.ValidationError / ValueError: a bad field (the message names it).
    """
    run = ScenarioRun.model_validate({k: v for k, v in params.items() if v is not None})
    run_dir = preflight(run)
    run_dir.mkdir(parents=True)
    return run, run_dir


def judge_against_history(record: RunRecorder) -> Path:
    """Write summary.json, compare the run with the history (a numerics regression fails the
    verdict), append it, publish the report; returns the summary's path. A broken history store
    is logged and reported, never allowed to hide the run's own outcome."""
    logger = get_run_logger()
    summary_path = record.write()
    comparison = None
    try:
        comparison = compare_history(str(summary_path))
        numerics = comparison.numerics_regressions()
        if numerics and record.fields.get("verdict") == "pass":
            record.fields.update(verdict="fail", reason="loss curve regression: " + "; ".join(
                f"{f['metric']} {f['detail']}" for f in numerics))
        record.fields.update(findings=comparison.findings, regressions=comparison.regressions)
        summary_path = record.write()
        append_history(str(summary_path))
    except Exception as err:  # noqa: BLE001 - the history is secondary to the run's own result
        logger.error("history: %s: %s", type(err).__name__, err)
    report(str(summary_path), None,  # None: the run folder's metrics.csv, also after a failed training
           golden=comparison.golden if comparison else None, history=comparison.previous if comparison else None,
           findings=comparison.findings if comparison else None)
    return summary_path


@flow(name="qwen3-scenario")
def qwen3_scenario(
    scenario: ScenarioName | None = None,
    target: TargetName | None = None,
    init: Init | None = None,
    weights: str | None = None,
    steps: int | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    nproc: int | None = None,
    lr: float | None = None,
    warmup_steps: int | None = None,
    seed: int | None = None,
    export_dtype: ExportDtype | None = None,
    compile: bool | None = None,
    kernels: dict[str, str] | None = None,
    timeout_s: float | None = None,
    runs_dir: str | None = None,
    run_id: str | None = None,
) -> dict:
    """Run one Qwen3 scenario; returns the summary dict (also in ``runs/<id>/summary.json``).

    Raises:
        on bad parameters before any task; otherwise the failing task's error,
        after summary.json names that task.
    """
    run, run_dir = prepare(dict(locals()))  # first line: locals() is exactly the parameters
    logger = get_run_logger()
    logger.info("run %s with %s", run_dir.name, run.model_dump_json())
    logger.info("kernels: %s", run.kernels_resolved)
    record = RunRecorder(run_dir, {
        "run_id": run_dir.name, "scenario": run.scenario, "target": run.target, "init": run.init,
        "steps": run.steps, "kernels": run.kernels_resolved, "parameters": run.model_dump(),
        "flow_run_id": str(runtime.flow_run.id),
    })
    try:
        builds = run.init == "pretrained" and run.weights is None  # may pretrain the embedded checkpoint first
        with record.task("pull_weights"), training_slot() if builds else contextlib.nullcontext():
            weights_dir = pull_weights(run.weights, run.init, SCENARIOS[run.scenario].model_type)
        with record.task("render_config"):
            rendered = render_config(run, weights_dir, str(run_dir))
        with record.task("compile_warmup"):
            record.fields["compile_warmup"] = compile_warmup(run, rendered).model_dump()
        with record.task("train"), training_slot() as slot:
            logger.info("holding the training slot %s", slot)
            trained = train(rendered, run.timeout_s, run.nproc_resolved)
            record.fields.update(losses=trained.losses, tokens_per_s=trained.tokens_per_s,
                                 peak_rss_bytes=trained.peak_rss_bytes, peak_memory_gib=trained.peak_memory_gib,
                                 train_log=trained.log_path)
        with record.task("export"):
            exported = export(rendered.job_path, str(run_dir))
            export_dir = exported.export_dir
            record.fields.update(export_dir=export_dir, export_untied_lm_head=exported.untied_lm_head)
        with record.task("validate"):
            validation = validate(export_dir, rendered.job_path, run.tolerances)
            record.fields["validation"] = validation.model_dump()
            validation.raise_for_problems()
        with record.task("compare_loss"):
            golden = curve_path(run.scenario, run.target, run.init) if run.weights is None else None  # goldens are of
            verdict = compare_loss(trained.losses, weights_dir, run.init, run.tolerances,  # the embedded weights
                                   SCENARIOS[run.scenario].output_init, str(golden) if golden else None)
            record.fields.update(verdict.model_dump())
    finally:
        summary_path = judge_against_history(record)
    if record.fields["verdict"] != "pass":
        raise RuntimeError(f"verdict fail: {record.fields.get('reason')}; see {summary_path}")
    return record.fields | {"timings_s": record.timings_s, "summary": str(run_dir / SUMMARY)}
