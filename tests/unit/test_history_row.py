"""The history's row is declared once: its columns' dtypes, the metrics the rules may name, the columns compared
side by side and where each value comes from all follow from the typed fields (titanflow.history_row), and a
result's metric is lifted into the row by its mark alone."""

import typing

from helpers.history_rows import history_row
from pydantic import BaseModel, Field

from titanflow import history_row as rows
from titanflow.judge.regression import HISTORY_METRICS
from titanflow.launch.torchrun import TrainResult
from titanflow.record.history import SOURCES, _frame
from titanflow.record.run_compare import PROVENANCE, SIDE_BY_SIDE
from titanflow.record.summary import RunSummary


def test_the_int_columns_are_nullable_integers_in_the_table():
    assert rows.DTYPES == {name: "Int64" for name in ("peak_rss_bytes", "nproc", "steps", "resumed_from_step",
                                                       "attempts", "resumes", "validate_peak_rss_bytes")}
    failed = history_row("f", 3, tokens_per_s=None, peak_rss_bytes=None, resumes=None)
    df = _frame([history_row("p", 2, resumes=1), failed])
    assert {column: str(df[column].dtype) for column in rows.DTYPES} == rows.DTYPES  # None among them, or all None
    assert df.peak_rss_bytes.isna().tolist() == [False, True] and str(df.tokens_per_s.dtype) == "float64"


def _among(found: tuple[str, ...], named: tuple[str, ...]) -> tuple[str, ...]:
    """The names of ``found`` that are in ``named``, in ``found``'s order (a metric added since aside)."""
    return tuple(name for name in found if name in named)


def test_the_metrics_are_the_marked_fields_the_results_first():
    """The lists the hand-kept tuples held, in their order (the rules file's message lists them so)."""
    metrics = ("tokens_per_s", "peak_memory_gib", "peak_rss_bytes", "first_step_loss", "final_loss",
               "compile_warmup_s", "total_s")
    assert _among(rows.METRICS, metrics) == metrics
    assert rows.METRICS[:len(rows.LIFTED)] == rows.LIFTED
    assert _among(rows.LIFTED, metrics) == ("tokens_per_s", "peak_memory_gib", "peak_rss_bytes")
    assert HISTORY_METRICS == (*rows.METRICS, "task_seconds")
    side = ("tokens_per_s", "peak_memory_gib", "peak_rss_bytes", "compile_warmup_s", "slot_wait_s", "total_s")
    assert _among(SIDE_BY_SIDE, side) == side and SIDE_BY_SIDE[-3:] == side[-3:]
    assert PROVENANCE == ("torch_version", "torchtitan_version", "transformers_version", "prefect_version",
                          "git_commit", "git_dirty", "environment_key", "weights_digest", "stack_digest", "hardware",
                          "metrics_source")
    # the step time and MFU the run's TensorBoard event files give (titanflow.launch.event_files): history metrics
    assert _among(rows.LIFTED, ("step_time_s", "mfu_pct")) == ("step_time_s", "mfu_pct")
    assert SOURCES["metrics_source"] == "train.metrics_source"


def test_a_results_metric_is_a_column_of_its_name_type_and_description():
    lifted = rows.HistoryRow.model_fields["peak_rss_bytes"]
    assert lifted.annotation == int | None and lifted.default is None  # None for a run that never trained
    assert lifted.description == TrainResult.model_fields["peak_rss_bytes"].description
    assert SOURCES["peak_rss_bytes"] == "train.peak_rss_bytes"
    assert SOURCES["compile_warmup_s"] == "compile_warmup.seconds" and SOURCES["resumes"] == "resumes"


def test_a_new_metric_of_a_result_needs_nothing_but_its_field(monkeypatch):
    class Trained(TrainResult):
        first_step_seconds: float | None = Field(None, description="wall seconds of step 1",
                                                 json_schema_extra={"metric": True})

    monkeypatch.setitem(rows.RESULT_PARTS, "train", Trained)
    annotation, field = rows._lifted()["first_step_seconds"]
    assert annotation == float | None and field.description == "wall seconds of step 1"
    assert field.json_schema_extra == {"metric": True, "source": "train.first_step_seconds"}


def test_the_result_parts_are_the_run_records_and_no_other_part_has_a_metric():
    for part, model in rows.RESULT_PARTS.items():
        assert model in typing.get_args(RunSummary.model_fields[part].annotation)
    others = {name: field.annotation for name, field in RunSummary.model_fields.items() if name not in rows.RESULT_PARTS}
    for name, annotation in others.items():
        for model in (a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type)
                      and issubclass(a, BaseModel)):
            marked = [f for f, info in model.model_fields.items() if rows.is_metric(info)]
            assert not marked, f"RunSummary.{name} ({model.__name__}) has metrics {marked}: add it to RESULT_PARTS"


def test_every_column_is_filled_from_the_record_or_computed():
    """A column without a default is required: a row built from a summary fills each (test_history builds them)."""
    computed = {"config_key", "parameters", "started_at", "finished_at", "failure_class", "first_step_loss",
                "final_loss", "losses", "torch_version", "torchtitan_version", "transformers_version",
                "prefect_version", "git_commit", "git_dirty", "nproc", "run_dir", "environment_key",
                "stack_digest", "hardware", "resumed_from_step", "attempts"}
    assert set(rows.HistoryRow.model_fields) == set(SOURCES) | computed
