"""compare_history / append_history: judge a finished run against the run history, then add it.

``compare_history`` builds the run's history row (titanflow.history) and evaluates the
regression rules (titanflow.regression, rules in ``titanflow/regression_rules.toml``)
against the golden loss curve and the last passing comparable runs; it also returns
those curves for the report's plot. ``append_history`` then adds the row, after the
flow has folded a loss-curve regression into the verdict. The store is
``$TITANFLOW_HISTORY`` (default ``<repo>/history``).
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger
from pydantic import BaseModel

from titanflow import history, regression
from titanflow.expectations import curve_path, read_curve


class HistoryComparison(BaseModel):
    """Findings of every rule (``Finding.as_record`` dicts), the failed ones, and the curves the
    run was compared with: golden {step: loss} (None when there is none for this workload) and
    {run id: losses} of the last passing comparable runs."""

    findings: list[dict]
    regressions: list[dict]
    golden: dict[int, float] | None
    previous: dict[str, list[float]]

    def numerics_regressions(self) -> list[dict]:
        """Failed findings of class numerics (the loss curve left its band)."""
        return [f for f in self.regressions if f["class"] == "numerics"]


@task(name="compare_history")
def compare_history(summary_path: str) -> HistoryComparison:
    """Prefect task: evaluate the run of ``summary_path`` against the history (not yet appended)."""
    row = history.row_from_summary(summary_path)
    past = history.read_history(scenario=row["scenario"], target=row["target"], init=row["init"])
    rules = regression.load_rules()
    findings = regression.evaluate(row, past, rules)
    curve = curve_path(row["scenario"], row["target"], row["init"])
    golden = None
    if curve.is_file():
        steps, key = read_curve(curve)
        golden = steps if key == row["config_key"] else None
    previous = regression.baseline_runs(row, past, rules.baseline) if not past.empty else past
    failed = regression.regressions(findings)
    for finding in failed:
        get_run_logger().warning("regression (%s): %s %s", finding.finding_class, finding.metric, finding.detail)
    return HistoryComparison(
        findings=[f.as_record() for f in findings], regressions=[f.as_record() for f in failed], golden=golden,
        previous={r.run_id: list(r.losses) for r in previous.itertuples()} if not previous.empty else {},
    )


@task(name="append_history")
def append_history(summary_path: str) -> str:
    """Prefect task: append the run to the history table; returns the table's path."""
    history.append_run(summary_path)
    table = history.history_file()
    get_run_logger().info("history: appended %s to %s", Path(summary_path).parent.name, table)
    return str(table)
