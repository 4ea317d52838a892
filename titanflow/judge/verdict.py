"""The run's verdict, decided in one place from what the run recorded.

    cancelled  the run was stopped before it ended: a Prefect cancel (SIGTERM), Ctrl-C
               (titanflow.record.summary.Cancellation says how, in which task, and the steps it
               logged); nothing is judged and it is never a failure class;
    fail       a task raised (its error says why), or the first-step loss is out of its band,
               or the loss curve left its golden band (a failed ``numerics`` finding), or a performance
               figure was out of its margin on the consecutive runs the rules ask (a failed ``performance``
               finding: titanflow.judge.regression);
    pass       the first-step loss is within its band and no finding failed;
    None       the run has not got that far (nothing judged yet).

A performance finding out of margin on fewer consecutive runs is "flagged" ("1 of 2"): said in the report, the run
passes. The verdict's type is titanflow.results.Verdict.
"""

from __future__ import annotations

from titanflow.results import Finding, LossVerdict, Verdict
from titanflow.task_names import TaskName


def final_verdict(failed_task: TaskName | None, loss: LossVerdict | None, findings: list[Finding],
                  cancelled: str | None = None) -> tuple[Verdict | None, str | None]:
    """(verdict, reason) of a run (module docstring); ``cancelled``: how the run was stopped (the
    reason given), None when it was not. The reason of a failed task is its error, not repeated here."""
    if cancelled is not None:
        return "cancelled", cancelled
    if failed_task is not None:
        return "fail", None
    if loss is None:
        return None, None
    if loss.verdict != "pass":
        return loss.verdict, loss.reason
    numerics = [f for f in findings if f.status == "fail" and f.finding_class == "numerics"]
    if numerics:
        return "fail", "loss curve regression: " + "; ".join(f"{f.metric} {f.detail}" for f in numerics)
    performance = [f for f in findings if f.status == "fail" and f.finding_class == "performance"]
    if performance:
        return "fail", "performance regression: " + "; ".join(f"{f.metric} {f.detail}" for f in performance)
    return loss.verdict, loss.reason
