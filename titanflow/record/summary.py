"""The run record: :class:`RunSummary`, written as ``runs/<id>/summary.json``.

The summary is composed of what the tasks return (warm-up, training, export, validation, loss
verdict, history findings), plus the run's identity, the failure or cancellation if any and per-task timings.
Every reader (history, report, CLI, nightly) validates it with
``RunSummary.model_validate_json``. The flow fills it through titanflow.run.recorder.RunRecorder; when
a task raises, the recorder records the failed task and its error, and the flow writes the summary in its
``finally`` before the exception propagates (the flow run ends Failed, its logs stay in
``runs/<id>/``). A run stopped from outside (a Prefect cancel, Ctrl-C: titanflow.prefect_ops.stopped.cancel_cause) is
recorded as a :class:`Cancellation` instead: verdict ``cancelled``, the task it happened in and the
losses of the steps it logged, never a failure. The file carries ``schema_version``; summaries of
earlier versions (the results' fields at the top level, written before the record was typed) are read as
the current one (titanflow.record.schema).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field, model_validator

from titan_cfg.job import Init
from titanflow.judge.failures import classify_failure
from titanflow.record.schema import SUMMARY_VERSION, upgrade_summary
from titanflow.results import (
    ExportResult,
    FailureClass,
    Finding,
    LossVerdict,
    TrainResult,
    ValidationReport,
    Verdict,
    WarmupResult,
    non_finite_steps,
)
from titanflow.task_names import TaskName

#: torchtitan's message when a step's loss is NaN or inf (torchtitan/trainer.py, Trainer.train_step).
NON_FINITE_STOP = re.compile(r"Loss is not finite \(global_avg_loss=[^)]*\) at step (\d+)")

#: The summary's file name inside the run folder.
SUMMARY = "summary.json"


class Cancellation(BaseModel):
    """A run stopped from outside before it ended (titanflow.prefect_ops.stopped.cancel_cause): its verdict is ``cancelled``,
    never a failure class."""

    cause: str = Field(description="how it was stopped, e.g. 'interrupted (Ctrl-C)' (cancel_cause)")
    task: TaskName | None = Field(description="the task it happened in; None between tasks")
    losses: list[float] = Field(default_factory=list, description="nats, step 1 first: the steps logged "
                                "before it (the run folder's metrics.csv)")

    @property
    def reason(self) -> str:
        """``<cause> in <task> after <n> logged step(s)``: the verdict's reason."""
        where = f" in {self.task}" if self.task else " between tasks"
        return f"{self.cause}{where} after {len(self.losses)} logged step(s)"


class Continuation(BaseModel):
    """One time a run was continued in its own folder (titanflow.run.resume): ``titanflow run --resume``, the flow's
    ``resume`` parameter, or a retried flow run."""

    flow_run_id: str | None = Field(description="the flow run that continued it")
    previous_flow_run_id: str | None = Field(description="the flow run whose end it continued")
    previous_verdict: Verdict | None = Field(description="how that one ended: fail, cancelled, or None when it was "
                                             "killed before it wrote a verdict")
    previous_reason: str | None = Field(None, description="its reason or error, cut to 500 characters")
    from_step: int | None = Field(description="the newest complete step checkpoint when it was continued: training "
                                  "goes on after it; None: no step checkpoint, training starts at step 1")
    at: datetime.datetime = Field(description="UTC, when it was continued")


class RunSummary(BaseModel):
    """Everything a run produced and how it ended; ``None`` parts were not reached."""

    schema_version: int = Field(SUMMARY_VERSION, description="the file's format (titanflow.record.schema); a file "
                                "without it is version 1, read as the current one")
    run_id: str = Field(description="the run folder's name, runs/<run_id>")
    flow_run_id: str | None = Field(None, description="the Prefect flow run that ran it")
    scenario: str = Field(description="titan_cfg.scenarios name")
    target: str = Field(description="titan_cfg.targets name")
    init: Init = Field(description="random | pretrained")
    steps: int = Field(description="training steps asked for")
    kernels: dict[str, str] = Field(default_factory=dict, description="kernel implementation per op, resolved")
    dataset: str | None = Field(None, description="the text trained on: botchan (cpu, cuda) or c4_test (trn2; "
                                "titanflow.launch.dataset); None before the job was rendered")
    parameters: dict[str, Any] = Field(default_factory=dict, description="ScenarioRun as validated (model_dump)")
    started_at: datetime.datetime | None = Field(None, description="UTC, when the flow began the run")
    finished_at: datetime.datetime | None = Field(None, description="UTC, when the summary was last written")
    compile_warmup: WarmupResult | None = Field(None, description="the compile_warmup task's result")
    train: TrainResult | None = Field(None, description="the train task's result: losses, tokens/s, memory")
    export: ExportResult | None = Field(None, description="the export task's result")
    validation: ValidationReport | None = Field(None, description="the validate task's four levels")
    loss: LossVerdict | None = Field(None, description="the compare_loss task's first-step verdict")
    findings: list[Finding] = Field(default_factory=list, description="every regression rule on this run "
                                    "(compare_history)")
    verdict: Verdict | None = Field(None, description="the run's verdict: pass | fail | cancelled "
                                    "(titanflow.judge.verdict.final_verdict)")
    reason: str | None = Field(None, description="why the verdict, in numbers")
    failed_task: TaskName | None = Field(None, description="the task that raised, if any")
    error: str | None = Field(None, description="``<exception type>: <message>`` of the failed task")
    cancelled: Cancellation | None = Field(None, description="how, where and how far a run stopped from "
                                           "outside got (a Prefect cancel, Ctrl-C); None when it was not")
    timings_s: dict[str, float] = Field(default_factory=dict, description="wall seconds per task, in run order; "
                                        "a wait for the training slot is not in them (slot_wait_s)")
    task_peak_rss_bytes: dict[str, int] = Field(
        default_factory=dict, description="per task, in run order: the flow process's peak resident set (bytes) "
        "while the task ran, the kernel's high-water mark reset at the task's start (titanflow.run.peak_rss); it "
        "includes what the process held before, not processes the task started (train: train.peak_rss_bytes). "
        "{} for a summary written before it was recorded, or where the kernel cannot reset the mark")
    history_error: str | None = Field(None, description="why the run could not be compared with the history "
                                      "or appended to it (its verdict stands; the report and CLI say so)")
    slot_wait_s: float = Field(0.0, description="seconds spent waiting for the node's training slot "
                               "(titanflow.prefect_ops.slot), apart from every task's time")
    environment: dict | None = Field(None, description="the numerics environment the run computed in (CPU, "
                                     "instruction set, versions: titanflow.judge.environment)")
    stack: dict | None = Field(None, description="every Python distribution the run's process could import and "
                               "their digest (titanflow.judge.environment.installed_stack); None before it was kept")
    weights_digest: str | None = Field(None, description="pretrained init: content hash of the checkpoint "
                                       "loaded (titanflow.weights.digest)")
    resumed: list[Continuation] = Field(default_factory=list, description="each time the run was continued in its "
                                        "own folder, oldest first (titanflow.run.resume); [] for a run never resumed")
    cached_tasks: list[str] = Field(default_factory=list, description="tasks whose result Prefect's cache gave, "
                                    "without running (titanflow.prefect_ops.caching)")

    @computed_field(description="how many times the run was continued in its own folder (len(resumed))")
    @property
    def resumes(self) -> int:
        return len(self.resumed)

    @computed_field(description="sum of timings_s (s)")
    @property
    def total_s(self) -> float:
        return round(sum(self.timings_s.values()), 3)

    @computed_field(description="first step whose loss is NaN or infinite: from the losses logged, else from "
                    "torchtitan's own stop ('Loss is not finite ... at step N', which it raises before logging "
                    "the step); None when every step was finite")
    @property
    def first_non_finite_step(self) -> int | None:
        bad = non_finite_steps(self.losses)
        if bad:
            return bad[0]
        stop = NON_FINITE_STOP.search(self.error or "")
        return int(stop.group(1)) if stop else None

    @property
    def losses(self) -> list[float]:
        """Per-step losses (nats, step 1 first) of a finished training, else those a cancelled run
        logged; [] otherwise."""
        return self.train.losses if self.train else self.cancelled.losses if self.cancelled else []

    @property
    def regressions(self) -> list[Finding]:
        """The findings out of margin."""
        return [f for f in self.findings if f.passed is False]

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data):
        """Read summaries of every version (titanflow.record.schema.upgrade_summary)."""
        return upgrade_summary(data) if isinstance(data, dict) else data


def read_summary(path: Path | str) -> RunSummary:
    """The summary at ``path`` (a summary.json), validated.

    Raises:
        FileNotFoundError: no file at ``path``.
        pydantic.ValidationError: the file is not a titanflow summary (names the fields).
    """
    return RunSummary.model_validate_json(Path(path).read_text())


def recorded_stack(run_dir: Path | str | None) -> dict | None:
    """The installed stack the summary.json of ``run_dir`` recorded (``RunSummary.stack``); None without one: a run
    from before it was kept, a folder that is gone, or a summary that does not read."""
    path = Path(run_dir or "") / SUMMARY
    try:
        return read_summary(path).stack if run_dir and path.is_file() else None
    except (OSError, ValueError):
        return None


def classify(summary: RunSummary, log_tail: str = "", losses: list[float] | None = None) -> FailureClass | None:
    """:func:`classify_failure` of a run's summary; ``losses`` default to the summary's (pass the
    metrics.csv ones for a run whose train task failed). A run whose loss held and whose only failed findings are
    performance ones is of class performance."""
    held = summary.loss is not None and summary.loss.verdict == "pass"
    failed = [f for f in summary.findings if f.status == "fail"]
    performance_failed = held and bool(failed) and all(f.finding_class == "performance" for f in failed)
    return classify_failure(verdict=summary.verdict, failed_task=summary.failed_task, error=summary.error,
                            losses=summary.losses if losses is None else losses, log_tail=log_tail,
                            performance_failed=performance_failed)
