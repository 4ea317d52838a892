"""A run whose metrics hold inf or NaN keeps every row of its metrics table artifact (strict JSON, as
the UI parses it) and its loss-curve plot, which draws the finite points and marks the non-finite steps.

The metrics come from the real rank-0 log of ``titanflow run native --target cpu --steps 3``
(tests/fixtures/README.md) with step 2's loss and grad_norm made ``inf`` and step 3's ``nan``, as
torchtitan prints a diverged step (``f"{x:7.4f}"`` of inf/NaN).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import FIXTURES

from titanflow.launch.metrics import metrics_table
from titanflow.record.summary import RunSummary
from titanflow.report import artifacts
from titanflow.report.artifacts import publish_findings, table_cell, table_rows
from titanflow.report.plots import (
    loss_curve_figure,
    non_finite_steps_of,
    write_loss_curve,
)
from titanflow.run.recorder import RunRecorder
from titanflow.tasks.report import report
from titanflow.tasks.train import train

FIELDS = {"run_id": "native-cpu-random-diverged", "scenario": "native", "target": "cpu", "init": "random", "steps": 3}
#: The fixture log's three losses, step 2 made inf and step 3 NaN.
LOSSES = [11.94006, math.inf, math.nan]


def _diverged_lines() -> list[str]:
    """The fixture log, step 2's loss and grad_norm printed as inf, step 3's as nan."""
    text = (FIXTURES / "train-native-cpu-3steps.log").read_text()
    for old, new in [("loss: 11.93394", "loss:     inf"), ("grad_norm:  0.7382", "grad_norm:     inf"),
                     ("loss: 11.89889", "loss:     nan"), ("grad_norm:  0.9632", "grad_norm:     nan")]:
        assert text.count(old) >= 1, old
        text = text.replace(old, new)
    return text.splitlines()


def _strict_json(text: str):
    """``json.loads`` that refuses NaN, Infinity and -Infinity, as the browser's JSON.parse does."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def diverged_metrics(tmp_path) -> Path:
    """``metrics.csv`` of the diverged log, written and read back as the train and report tasks do."""
    path = tmp_path / "metrics.csv"
    metrics_table(_diverged_lines()).to_csv(path, index=False)
    return path


@pytest.mark.fault
def test_non_finite_cells_become_strings_and_numpy_scalars_python_values():
    import numpy as np

    assert [table_cell(v) for v in (math.nan, math.inf, -math.inf, np.float32("inf"), np.float64(1.5),
                                    np.int64(3), None, "x")] == ["nan", "inf", "-inf", "inf", 1.5, 3, None, "x"]
    assert type(table_cell(np.int64(3))) is int


@pytest.mark.fault
def test_metrics_artifact_keeps_every_row_as_strict_json(diverged_metrics, monkeypatch):
    import pandas as pd
    from prefect.artifacts import TableArtifact

    table = pd.read_csv(diverged_metrics)
    assert table.loss.tolist()[:2] == [11.94006, math.inf] and math.isnan(table.loss[2])  # what the CSV holds
    published = {}
    monkeypatch.setattr(artifacts, "create_table_artifact", lambda **kwargs: published.update(kwargs) or "id")
    artifacts.publish_metrics(table, "native-cpu-random", FIELDS["run_id"])
    rows = published["table"]
    json.dumps(rows, allow_nan=False)  # raises ValueError on any NaN or inf left
    assert [(r["step"], r["loss"], r["grad_norm"]) for r in rows] == [
        (1, 11.94006, 0.8053), (2, "inf", "inf"), (3, "nan", "nan")]
    # the text Prefect sends to the server is strict JSON with the three rows
    assert _strict_json(TableArtifact(table=rows).format()) == rows
    assert published["key"] == "native-cpu-random-metrics"
    assert published["description"] == (f"per-step metrics of run {FIELDS['run_id']}; "
                                        "loss not finite from step 2 (2 of 3 steps)")


def test_prefect_alone_would_write_inf_as_invalid_json():
    """Why table_rows exists: Prefect turns NaN into null but writes inf as the bare token Infinity."""
    from prefect.artifacts import TableArtifact

    with pytest.raises(ValueError, match="Infinity is not JSON"):
        _strict_json(TableArtifact(table=[{"step": 2, "loss": math.inf}]).format())


@pytest.mark.fault
def test_findings_table_cells_are_strict_json(monkeypatch):
    from titanflow.results import Finding

    finding = Finding(metric="losses", value=math.inf, baseline=11.93389, margin=0.02, passed=False, status="fail",
                      finding_class="numerics", detail="step 2")
    published = {}
    monkeypatch.setattr(artifacts, "create_table_artifact", lambda **kwargs: published.update(kwargs) or "id")
    publish_findings([finding], "native-cpu-random", "r1")
    assert json.loads(json.dumps(published["table"], allow_nan=False))[0]["value"] == "inf"
    assert table_rows([{"a": math.nan}]) == [{"a": "nan"}]


@pytest.mark.fault
def test_plot_draws_finite_points_and_marks_the_first_non_finite_step(tmp_path):
    losses = {1: 11.94, 2: 11.93, 3: math.inf, 4: 11.85, 5: math.nan, 6: 11.7}
    assert non_finite_steps_of(losses) == [3, 5]
    fig = loss_curve_figure(losses)
    (ax,) = fig.axes
    run_line = ax.get_lines()[-1]  # this run, on top
    assert run_line.get_label() == "this run"
    drawn = [(int(s), v) for s, v in zip(run_line.get_xdata(), run_line.get_ydata()) if math.isfinite(v)]
    assert drawn == [(1, 11.94), (2, 11.93), (4, 11.85), (6, 11.7)]  # every finite point, no inf
    (marker,) = [line for line in ax.get_lines() if line.get_label().startswith("non-finite")]
    assert list(marker.get_xdata()) == [3, 3]  # vertical line at the first non-finite step
    assert "non-finite at step 3 (2 steps)" in [t.get_text() for t in ax.get_legend().get_texts()]
    (crosses,) = ax.collections
    assert crosses.get_offsets()[:, 0].tolist() == [3, 5]  # one x per non-finite step
    low, high = ax.get_ylim()
    assert 11.6 < low < 11.7 and 11.94 < high < 12.0  # scaled to the finite losses, not stretched by inf
    path = write_loss_curve(tmp_path / "loss_curve.png", losses)
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.fault
def test_plot_of_a_run_with_no_finite_loss_still_draws(tmp_path):
    fig = loss_curve_figure([math.nan, math.nan])
    assert "non-finite at step 1 (2 steps)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert write_loss_curve(tmp_path / "nan.png", [math.nan]).stat().st_size > 0


def test_plot_of_a_finite_run_has_no_marker():
    (ax,) = loss_curve_figure([11.94, 11.93]).axes
    assert [line.get_label() for line in ax.get_lines()] == ["this run"] and not ax.collections


# --- against a Prefect server ------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefect_server():
    """A temporary Prefect server (SQLite in a temporary folder) for this module, heartbeats off."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90), \
            temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


@pytest.mark.fault
def test_report_of_a_diverged_run_reads_back_every_row(prefect_server, tmp_path):
    from prefect import flow, get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    metrics_table(_diverged_lines()).to_csv(run_dir / "metrics.csv", index=False)
    record = RunRecorder(run_dir, RunSummary(**FIELDS))
    with pytest.raises(RuntimeError), record.task(train):
        raise RuntimeError("train: loss is not finite from step 2")
    summary_path = record.write()

    @flow
    def publish():
        report(str(summary_path), None, golden=[11.944, 11.93, 11.9])

    state = publish(return_state=True)
    assert state.is_completed()
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    by_key = {a.key: a for a in found}
    metrics = by_key["native-cpu-random-metrics"]
    rows = _strict_json(metrics.data)  # what the UI parses
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 11.94006), (2, "inf"), (3, "nan")]
    assert metrics.description.endswith("loss not finite from step 2 (2 of 3 steps)")
    assert "data:image/png;base64," in by_key["native-cpu-random-summary"].data  # the plot is inlined
    assert (run_dir / "loss_curve.png").stat().st_size > 0
