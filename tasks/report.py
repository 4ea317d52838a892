"""report: the run's Prefect artifacts and loss-curve plot (titanflow.report.publish)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from prefect import task

from titanflow.report.plots import Curve
from titanflow.report.publish import publish_report
from titanflow.results import Finding
from titanflow.task_names import TaskName


@task(name=TaskName.report)
def report(summary_path: str, metrics_path: str | None, golden: Curve | None = None,
           history: Mapping[str, Curve] | None = None, findings: list[Finding] | None = None) -> None:
    """Prefect task: :func:`titanflow.report.publish.publish_report`."""
    publish_report(Path(summary_path), Path(metrics_path) if metrics_path else None, golden, history, findings)
