"""The history's row: one scenario run as a row of the history table, its columns and their types.
titanflow.record.history builds rows from run summaries and keeps the table; titanflow.judge.regression judges
its metric columns; titanflow.record.run_compare sets two rows side by side.

Each column is declared once, as a typed field with its description:

- the row's own columns: :class:`HistoryRow`'s fields;
- the metrics of the run record's results (:data:`RESULT_PARTS`), lifted into the row under their own names: a
  result's field declared with ``json_schema_extra={"metric": True}`` (``TrainResult.tokens_per_s``) is the
  column ``tokens_per_s``, None for a run without that result. A new metric of a result is that field, with a default
  (``None``: summaries written before it still read), and its producer: the row, the table's dtype and the metrics
  the rules may name follow.

What the fields' ``json_schema_extra`` says:

- ``"metric": True``: a column a ``history_median`` rule may name (:data:`METRICS`);
- ``"provenance": True``: what the run ran with besides its parameters (versions, commit, numerics);
- ``"source"``: where titanflow.record.history.row_from_summary copies the value from, a dotted path into the run
  record (``train.tokens_per_s``, ``task_peak_rss_bytes.validate``). A column without one takes the run record's
  field of its name, or the row's producer computes it (the losses, the times, the versions).

The types give the table's dtypes (:data:`DTYPES`): an ``int`` column is pandas' nullable ``Int64`` (a run without
the value keeps it an integer column); every other column takes pandas' own inference (float64, str, datetime64
UTC, object for the losses' lists).
"""

from __future__ import annotations

from types import UnionType
from typing import Any, Union, get_args, get_origin

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic.fields import FieldInfo

from titanflow.results import ExportResult, TrainResult, ValidationReport, WarmupResult

#: The run record's results whose metric fields the row lifts: RunSummary field -> its type (titanflow.results).
RESULT_PARTS: dict[str, type[BaseModel]] = {
    "compile_warmup": WarmupResult, "train": TrainResult, "export": ExportResult, "validation": ValidationReport,
}


#: The mark of a column that records what the run ran with besides its parameters (titanflow.record.run_compare).
_PROVENANCE = {"provenance": True}


def extra(field: FieldInfo) -> dict[str, Any]:
    """A field's ``json_schema_extra`` (``{}`` when it has none)."""
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def is_metric(field: FieldInfo) -> bool:
    """Whether a field is a metric: ``"metric": True`` in its ``json_schema_extra``."""
    return extra(field).get("metric") is True


def _lifted() -> dict[str, Any]:
    """The metric fields of :data:`RESULT_PARTS` as row fields: {name: (its type or None, a field with its
    description and its ``source``)}, in RESULT_PARTS' order and each type's own."""
    lifted: dict[str, Any] = {}
    for part, model in RESULT_PARTS.items():
        for name, field in model.model_fields.items():
            if is_metric(field):
                if name in lifted:
                    raise TypeError(f"{model.__name__}.{name}: another result has a metric {name!r}; fix: name it apart")
                lifted[name] = (field.annotation | None, Field(None, description=field.description, json_schema_extra={
                    **extra(field), "source": f"{part}.{name}"}))
    return lifted


class _Outcome(BaseModel):
    """The row's columns before the results' metrics: the run, how it ended, its losses."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_id: str = Field(description="the run folder's name")
    flow_run_id: str | None = Field(description="the Prefect flow run")
    scenario: str
    target: str
    init: str
    config_key: str = Field(description="hash of the parameters that define the workload (titanflow.judge.workload)")
    parameters: str = Field(description="summary.json parameters, as sorted JSON")
    started_at: pd.Timestamp = Field(description="UTC; summary.json, else its mtime minus total_s")
    finished_at: pd.Timestamp = Field(description="UTC; summary.json, else its modification time")
    verdict: str = Field(description="pass | fail | cancelled (stopped from outside: a Prefect cancel, "
                         "Ctrl-C; reason says how, in which task, after how many steps) | unknown (the run never "
                         "got a verdict). Only pass rows are baselines (titanflow.judge.regression.baseline_runs)")
    failure_class: str | None = Field(description="titanflow.record.summary.classify of the summary and the "
                                      "tail of train.log; None for a run that did not fail (passed, cancelled)")
    failed_task: str | None
    error: str | None
    reason: str | None = Field(description="why the verdict, e.g. a loss-curve regression")
    first_step_loss: float | None = Field(description="losses[0] (nats)", json_schema_extra={"metric": True})
    final_loss: float | None = Field(description="losses[-1] (nats)", json_schema_extra={"metric": True})
    losses: list[float] = Field(description="nats, step 1 first: summary.json, else the run's metrics.csv "
                                "(a run whose train task failed)")


#: The results' metrics (module docstring), after the row's outcome columns.
_ResultMetrics = create_model("_ResultMetrics", __base__=_Outcome, **_lifted())


class HistoryRow(_ResultMetrics):
    """One run as a row of the history table (module docstring: the results' metric fields are columns too). Besides
    these columns a row has ``seconds_<task>`` (float, s): wall seconds of each task the run reached (summary.json
    ``timings_s``)."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    compile_warmup_s: float | None = Field(description="seconds the compile warm-up took",
                                           json_schema_extra={"metric": True, "source": "compile_warmup.seconds"})
    total_s: float = Field(description="sum of the task times (s)", json_schema_extra={"metric": True})
    torch_version: str | None = Field(description="installed where the row was appended", json_schema_extra=_PROVENANCE)
    torchtitan_version: str | None = Field(json_schema_extra=_PROVENANCE)
    transformers_version: str | None = Field(json_schema_extra=_PROVENANCE)
    prefect_version: str | None = Field(json_schema_extra=_PROVENANCE)
    git_commit: str | None = Field(description="HEAD of the repository at append time", json_schema_extra=_PROVENANCE)
    git_dirty: bool | None = Field(description="tracked files differ from HEAD", json_schema_extra=_PROVENANCE)
    nproc: int | None = Field(description="world size: ranks of the launch (the job's)")
    steps: int = Field(description="training steps asked for")
    run_dir: str = Field(description="the run folder")
    slot_wait_s: float = Field(0.0, description="seconds waited for the training slot: in no task's time, "
                               "tokens/s or regression rule (tables written before it read 0 / NaN)")
    environment_key: str | None = Field(None, description="what decided the numbers (titanflow.judge.environment."
                                        "environment_key of summary.json's environment); None before it was kept",
                                        json_schema_extra=_PROVENANCE)
    weights_digest: str | None = Field(None, description="pretrained init: content hash of the checkpoint loaded",
                                       json_schema_extra=_PROVENANCE)
    stack_digest: str | None = Field(None, description="digest of every Python distribution the run could import "
                                     "(titanflow.judge.environment.installed_stack); None before it was kept",
                                     json_schema_extra=_PROVENANCE)
    hardware: str | None = Field(None, description="what the run computed on (titanflow.judge.environment.hardware: "
                                 "the target's node type and the CPU model and instruction set); None before it was "
                                 "kept", json_schema_extra=_PROVENANCE)
    resumed_from_step: int | None = Field(None, description="step of the step checkpoint the last training launch "
                                          "resumed from (titanflow.launch.resume); None: it started at step 1")
    attempts: int | None = Field(None, description="training launches of the run (train.log's launch lines); "
                                 "None: it never launched, or before they were counted")
    resumes: int | None = Field(None, description="times the run was continued in its own folder (titanflow run "
                                "--resume, the resume parameter, a retried flow run: summary.json resumed); None: "
                                "before they were counted")
    metrics_source: str | None = Field(None, description="where the step metrics came from (summary.json "
                                       "train.metrics_source: \"tensorboard\" or \"console line: <why>\"); None: no "
                                       "training result, or before it was kept",
                                       json_schema_extra={**_PROVENANCE, "source": "train.metrics_source"})
    validate_peak_rss_bytes: int | None = Field(None, description="peak resident set of the flow process while "
                                                "the validate task ran (summary.json task_peak_rss_bytes); None: "
                                                "not reached, or before it was recorded",
                                                json_schema_extra={"source": "task_peak_rss_bytes.validate"})

    def as_record(self) -> dict:
        """The row as the table stores it: the columns in table order, ``seconds_<task>`` after
        ``compile_warmup_s``."""
        fields = self.model_dump(exclude=set(self.model_extra or {}))
        names = list(fields)
        cut = names.index("compile_warmup_s") + 1  # the task times follow it, as in tables written before
        return {**{k: fields[k] for k in names[:cut]}, **(self.model_extra or {}),
                **{k: fields[k] for k in names[cut:]}}

    @model_validator(mode="after")
    def _only_task_seconds_extra(self) -> "HistoryRow":
        extra = self.model_extra or {}
        wrong = [k for k, v in extra.items() if not k.startswith("seconds_") or not isinstance(v, float)]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: a row's only extra columns are seconds_<task> (float seconds)")
        return self


def _is_int(annotation: Any) -> bool:
    """Whether a field's type is ``int`` or ``int | None``."""
    if get_origin(annotation) in (Union, UnionType):
        return [a for a in get_args(annotation) if a is not type(None)] == [int]
    return annotation is int


#: The columns whose dtype is not pandas' inference: the ``int`` ones, as nullable ``Int64``.
DTYPES: dict[str, str] = {name: "Int64" for name, field in HistoryRow.model_fields.items() if _is_int(field.annotation)}

#: The results' metric columns (module docstring).
LIFTED = tuple(name for name in _ResultMetrics.model_fields if name not in _Outcome.model_fields)
if clash := set(LIFTED) & (set(_Outcome.__annotations__) | set(HistoryRow.__annotations__)):
    raise TypeError(f"{', '.join(sorted(clash))}: a result's metric and a column of the row's own share a name; fix: "
                    "name the metric apart")

#: The metric columns: the results' first (RESULT_PARTS' order), then the row's own (table order).
METRICS: tuple[str, ...] = LIFTED + tuple(name for name, field in HistoryRow.model_fields.items()
                                           if is_metric(field) and name not in LIFTED)
