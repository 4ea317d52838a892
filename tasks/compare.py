"""compare_with_last_pass: a failed nightly run against the last passing comparable run (titanflow.report.compare)."""

from __future__ import annotations

from prefect import task
from prefect.logging import get_run_logger

from titanflow.report.compare import compare_with_last_pass
from titanflow.task_names import TaskName


@task(name=TaskName.compare_runs)
def compare_last_pass(run_id: str) -> str:
    """Prefect task: :func:`titanflow.report.compare.compare_with_last_pass` of ``run_id``; returns the
    comparison's headline, or why there is none (no passing run of the same workload before it)."""
    comparison = compare_with_last_pass(run_id)
    line = comparison.headline() if comparison else f"{run_id}: no passing comparable run before it to compare with"
    get_run_logger().info("compare: %s", line)
    return line
