"""A probe's scenario run as git bisect's good, bad or skip, against the check the bad revision fails.

A run's failed checks, as titanflow records them in summary.json:

| check | when |
|---|---|
| ``task <name>`` | the task ``failed_task`` raised (``train``, ``validate``, ...) |
| ``compare_loss`` | the first-step loss out of its band (``loss.verdict`` fail, titanflow.judge.loss) |
| ``<kind> <metric>`` | a numerics regression rule out of margin (a failed finding: ``golden_curve losses``) |

The bad revision's run names *the* check (:func:`learn_check`): its failure class (titanflow.judge.failures)
and its first failed check. A probe is then ``bad`` when its run fails with that class and that check
among its failed checks, ``good`` when it passes, and ``skip`` otherwise, as ``git bisect skip``: it failed
for another reason (another class or check, a crash, no summary), or was cancelled, so it says nothing
about the check.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from titanflow.bisect.session import BisectVerdict
from titanflow.judge.regression import CURVE_METRICS
from titanflow.record.summary import RunSummary, classify


class Check(BaseModel):
    """The check a bisect looks for: a failure class (titanflow.judge.failures) and a failed check (module
    docstring)."""

    model_config = ConfigDict(frozen=True)

    failure_class: str
    check: str

    def __str__(self) -> str:
        return f"{self.check} ({self.failure_class})"


class BisectRefused(ValueError):
    """The endpoints cannot be bisected (the bad one passes, the good one fails); the message starts with the
    field (``bad``, ``good``) and says why."""


def failed_checks(summary: RunSummary) -> list[str]:
    """The checks the run failed, in the order its verdict weighs them (module docstring); [] for a pass."""
    checks = [f"task {summary.failed_task}"] if summary.failed_task else []
    if summary.loss is not None and summary.loss.verdict == "fail":
        checks.append("compare_loss")
    checks += [f"{'golden_curve' if f.metric in CURVE_METRICS else 'history_median'} {f.metric}"
               for f in summary.regressions if f.finding_class == "numerics"]
    return checks


def learn_check(summary: RunSummary | None, log_tail: str = "", why: str = "", bad: str = "bad revision") -> Check:
    """The check the bad revision's (or environment's) run fails: its failure class and its first failed check.

    ``log_tail``: the end of its train.log (titanflow.record.summary.classify reads it); ``why``: what is known
    of a run without a summary (the probe's exit); ``bad``: what the fix asks for ("bad environment" in a bisect
    over environments).

    Raises:
        BisectRefused: the run passed, was cancelled, or ended without a summary or a failed check.
    """
    if summary is None:
        raise BisectRefused(f"bad: its run ended without a summary.json ({why or 'no reason given'}); the check it "
                            f"fails cannot be known; fix: pass a {bad} whose run ends with a failed verdict")
    if summary.verdict != "fail":
        raise BisectRefused(f"bad: its run ended {summary.verdict or 'without a verdict'} "
                            f"({summary.reason or summary.error or 'no reason recorded'}); nothing to bisect; fix: pass a "
                            f"{bad} whose run fails")
    checks = failed_checks(summary)
    failure_class = classify(summary, log_tail)
    if not checks or failure_class is None:
        raise BisectRefused(f"bad: its run failed without a failed check or class ({summary.reason}); fix: pass a "
                            f"{bad} whose run fails a task, its first-step loss or a numerics rule")
    return Check(failure_class=failure_class, check=checks[0])


def probe_verdict(summary: RunSummary | None, log_tail: str,
                  check: Check | None) -> tuple[BisectVerdict, str | None, list[str]]:
    """(verdict, failure class, failed checks) of a probe's run against ``check`` (module docstring; None: no
    check known yet, so no run is bad); a run without a summary is (skip, None, [])."""
    if summary is None:
        return "skip", None, []
    if summary.verdict == "pass":
        return "good", None, []
    checks = failed_checks(summary)
    failure_class = classify(summary, log_tail) if summary.verdict == "fail" else None
    if check is not None and failure_class == check.failure_class and check.check in checks:
        return "bad", failure_class, checks
    return "skip", failure_class, checks
