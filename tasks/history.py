"""compare_history / append_history: the run against the history (titanflow.record.comparison), then into it."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titanflow.record import history
from titanflow.record.comparison import HistoryComparison, compare_with_history
from titanflow.record.summary import RunSummary
from titanflow.task_names import TaskName


@task(name=TaskName.compare_history)
def compare_history(summary_path: str) -> HistoryComparison:
    """Prefect task: :func:`titanflow.record.comparison.compare_with_history`, each regression logged."""
    comparison = compare_with_history(Path(summary_path))
    for finding in comparison.regressions:  # failed, or flagged ("1 of 2": out of margin, not yet in a row)
        get_run_logger().warning("regression (%s, %s): %s %s", finding.finding_class, finding.status, finding.metric,
                                 finding.detail)
    return comparison


@task(name=TaskName.append_history)
def append_history(summary_path: str, summary: RunSummary | None = None) -> str:
    """Prefect task: append the run to the history table (titanflow.record.history); returns the table's path.
    ``summary``: the run's record when its summary.json could not be written (a full disk)."""
    history.append_run(summary_path, summary=summary)
    table = history.history_file()
    get_run_logger().info("history: appended %s to %s", Path(summary_path).parent.name, table)
    return str(table)
