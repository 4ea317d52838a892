"""validate: the export checks, four levels (titanflow.export.validate)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titan_cfg.job import Job
from titanflow.export.validate import validate_export
from titanflow.params import Tolerances
from titanflow.results import ValidationReport
from titanflow.task_names import TaskName


@task(name=TaskName.validate)
def validate(export_dir: str, job_path: str, tolerances: Tolerances) -> ValidationReport:
    """Prefect task: :func:`titanflow.export.validate.validate_export`, logged. The flow records the
    report, then calls :meth:`ValidationReport.raise_for_problems`, so a failed check is in summary.json."""
    report = validate_export(Path(export_dir), Job.read(Path(job_path)), tolerances)
    get_run_logger().info("validation: %s", report.model_dump_json())
    return report
