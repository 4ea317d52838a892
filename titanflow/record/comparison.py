"""A finished run against the run history: the regression rules and the curves compared.

The run's history row (titanflow.record.history) is evaluated with the regression rules
(titanflow.judge.regression, ``regression_rules.toml``) against the golden loss curve and the
last passing comparable runs; the findings go into the run's summary, whose verdict
titanflow.judge.verdict decides from them. The curves compared come back for the report's plot.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from titanflow.judge import regression
from titanflow.judge.goldens import golden_for
from titanflow.record import history
from titanflow.record.summary import read_summary
from titanflow.results import Finding


class HistoryComparison(BaseModel):
    """What comparing a run with the history found."""

    findings: list[Finding] = Field(description="every rule on the run, in rule order")
    golden: dict[int, float] | None = Field(description="{step: loss} of the golden curve of the run's workload; "
                                            "None when there is none")
    previous: dict[str, list[float]] = Field(description="{run id: losses} of the last passing comparable runs")

    @property
    def regressions(self) -> list[Finding]:
        """The findings out of margin."""
        return regression.regressions(self.findings)


def compare_with_history(summary_path: Path) -> HistoryComparison:
    """Evaluate the run of ``summary_path`` against the history (it is not appended here).

    Raises:
        FileNotFoundError / ValueError: ``summary_path`` is not a run's summary.json
            (titanflow.record.history.row_from_summary).
    """
    summary = read_summary(summary_path)
    row = history.row_from_summary(summary_path, summary)
    past = history.read_history(scenario=row.scenario, target=row.target, init=row.init)
    rules = regression.load_rules()
    findings = regression.evaluate(row.as_record(), past, rules, stack=summary.stack)
    curve = golden_for(row.scenario, row.target, row.init, summary.parameters.get("weights"),
                       model_spec=summary.parameters.get("model_spec"))
    previous = regression.baseline_runs(row.as_record(), past, rules.baseline) if not past.empty else past
    return HistoryComparison(
        findings=findings,
        golden=curve.losses if curve and curve.same_workload(row.config_key) else None,
        previous={r.run_id: list(r.losses) for r in previous.itertuples()} if not previous.empty else {},
    )
