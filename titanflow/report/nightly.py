"""The nightly suite's report: one :class:`SuiteRow` per scenario run, the suite's markdown and its final state.

    row = outcome(summary_path, state, scenario="moe", init="random", run_id=run_id)  # a finished subflow
    suite_markdown("cpu", rows)   # the ``nightly-<target>`` artifact's markdown
    suite_state(rows)             # Completed, Failed or Cancelled, its message counting the runs

A run that did not pass and was not cancelled failed; a cancelled run (verdict ``cancelled``: a Prefect
cancel, Ctrl-C) is counted apart, never as failed. Performance findings out of margin on fewer consecutive
runs than fail a run (titanflow.judge.regression: "1 of 2") are counted as flagged and listed with their count, and
so are runs whose history could not be recorded; a run that a performance rule failed (the Nth in a row) is a
failure of class ``performance``. The flow that runs the
suite and publishes this report is flows/nightly.py.
"""

from __future__ import annotations

from pathlib import Path

from prefect.states import Cancelled, Completed, Failed, State
from pydantic import BaseModel, Field

from titan_cfg.job import Init
from titanflow.record.summary import classify, read_summary
from titanflow.results import Verdict


class SuiteRow(BaseModel):
    """One scenario run of a nightly suite, as its report shows it."""

    scenario: str = Field(description="titan_cfg.scenarios name")
    init: Init = Field(description="random | pretrained")
    run_id: str = Field(description="the run folder's name, runs/<run_id>")
    verdict: Verdict = Field(description="pass | fail | cancelled (a run that never wrote a verdict: fail)")
    failure_class: str | None = Field(None, description="titanflow.judge.failures class of a run that did not pass "
                                      "(infrastructure when it ended before writing a summary); None otherwise")
    reason: str = Field("", description="why it ended so: the error or verdict reason of its summary, else the "
                        "message of the subflow's state; a cancelled run's says how and where")
    first_step_loss: float | None = Field(None, description="nats; None when the run did not get that far")
    flagged: int = Field(0, ge=0, description="regressions flagged that did not fail the run (slower, larger)")
    flags: list[str] = Field(default_factory=list, description="each finding out of margin that is not a numerics one "
                             "(flagged, or failing the run): '<metric>: <k> of <N>: <detail>'")
    curve: tuple[str, str] | None = Field(None, description="the golden_curve rule's finding on the run's losses "
                                          "(status, detail): what its curve was judged against (the node's baseline "
                                          "in its lane, or the golden), or why it had no baseline; None when the run "
                                          "got no finding")
    history_error: str | None = Field(None, description="why the run could not be recorded in the history; "
                                      "None when it was")
    compared: str | None = Field(None, description="the line comparing a failed run with the last passing run of "
                                 "its workload (tasks/compare.py), filled after the suite; None otherwise")


def outcome(summary_path: Path, state: State, *, scenario: str, init: Init, run_id: str) -> SuiteRow:
    """The suite row of a finished subflow: from its summary.json when it got that far, else from its
    ``state`` (cancelled before any task: verdict ``cancelled``; refused on bad parameters or ended
    otherwise: a failure of class ``infrastructure``, the state's message the reason).

    Raises:
        pydantic.ValidationError: ``summary_path`` exists but is not a titanflow summary
            (titanflow.record.summary.read_summary).
    """
    row = {"scenario": scenario, "init": init, "run_id": run_id}
    if not summary_path.is_file():
        reason = state.message or ""
        if state.is_cancelled():
            return SuiteRow(**row, verdict="cancelled", failure_class=None, reason=reason)
        return SuiteRow(**row, verdict="fail", failure_class="infrastructure", reason=reason)
    summary = read_summary(summary_path)
    return SuiteRow(
        **row,
        verdict=summary.verdict or "fail",
        failure_class=classify(summary) if summary.verdict != "pass" else None,
        reason=summary.error or summary.reason or "",  # a cancelled run's reason says how and where
        first_step_loss=summary.loss.first_step_loss if summary.loss else None,
        flagged=sum(1 for r in summary.regressions if r.status == "flagged"),
        flags=[f"{r.metric}: {r.streak + ': ' if r.streak else ''}{r.detail}" for r in summary.regressions
               if r.finding_class != "numerics"],
        curve=next(((f.status, f.detail) for f in summary.findings if f.metric == "losses"), None),
        history_error=summary.history_error,
    )


def tally(rows: list[SuiteRow]) -> tuple[list[SuiteRow], list[SuiteRow], int]:
    """(failed rows, cancelled rows, how many passed) of ``rows``, in their order; a run that did not
    pass and was not cancelled failed."""
    cancelled = [r for r in rows if r.verdict == "cancelled"]
    failed = [r for r in rows if r.verdict not in ("pass", "cancelled")]
    return failed, cancelled, len(rows) - len(failed) - len(cancelled)


def total_flagged(rows: list[SuiteRow]) -> int:
    """How many regressions the suite's runs flagged without failing (the sum of :attr:`SuiteRow.flagged`)."""
    return sum(r.flagged for r in rows)


def suite_markdown(target: str, rows: list[SuiteRow]) -> str:
    """The nightly report of ``target`` as markdown (ends with a newline): a headline counting the runs,
    one table line per scenario run (first-step loss in nats, 4 decimals; the loss curve's finding), then what each
    run's curve was judged against (the node's baseline and its lane, the golden, or no baseline), each failure with its
    reason (cut to 500 characters) and its comparison with the last passing run when there is one, each
    cancel, each performance finding out of margin with its consecutive count ("1 of 2" flagged, "2 of 2" failed),
    and each run whose history was not recorded."""
    failed, cancelled, passed = tally(rows)
    apart = f", {len(cancelled)} cancelled" if cancelled else ""
    lines = [f"# nightly on {target}: {passed} of {len(rows)} passed, {len(failed)} failed{apart}", "",
             "| scenario | init | verdict | class | first-step loss | loss curve | flagged | run |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        loss = f"{r.first_step_loss:.4f}" if r.first_step_loss is not None else "-"
        lines.append(f"| {r.scenario} | {r.init} | {r.verdict} | {r.failure_class or ''} | {loss} | "
                     f"{r.curve[0] if r.curve else '-'} | {r.flagged} | {r.run_id} |")
    lines.append("")
    lines += [f"- **{r.scenario} / {r.init}** loss curve, {r.curve[0]}: {r.curve[1][:400]}" for r in rows if r.curve]
    for r in failed:
        lines += ["", f"- **{r.scenario} / {r.init}** ({r.failure_class}): {r.reason[:500]}"]
        if r.compared:
            lines.append(f"  - against the last passing run: {r.compared}")
    for r in cancelled:
        lines += ["", f"- **{r.scenario} / {r.init}** cancelled, not failed: {r.reason[:500]}"]
    for r in rows:
        lines += [f"- **{r.scenario} / {r.init}** performance, {flag[:300]}" for flag in r.flags]
    for r in rows:
        if r.history_error:
            lines += ["", f"- **history not recorded** for {r.scenario} / {r.init}: {r.history_error[:500]}"]
    return "\n".join(lines) + "\n"


def suite_state(rows: list[SuiteRow]) -> State:
    """The suite's final Prefect state: Completed when every run passed; Failed when any failed (the
    message names how many and their classes); otherwise, when runs were cancelled, Cancelled. Each
    message counts cancelled runs apart and says how many regressions were flagged and histories not
    recorded."""
    failed, cancelled, passed = tally(rows)
    flagged = total_flagged(rows)
    unrecorded = sum(1 for r in rows if r.history_error)
    history = f"; history not recorded for {unrecorded} run(s)" if unrecorded else ""
    apart = f"; {len(cancelled)} cancelled" if cancelled else ""
    if failed:
        classes = ", ".join(sorted({f"{r.failure_class}" for r in failed}))
        return Failed(message=f"{len(failed)} of {len(rows)} scenario runs failed ({classes}){apart}; "
                              f"{flagged} flagged{history}")
    if cancelled:
        return Cancelled(message=f"{passed} of {len(rows)} scenario runs passed{apart}; {flagged} regressions "
                                 f"flagged{history}")
    return Completed(message=f"{len(rows)} of {len(rows)} scenario runs passed; {flagged} regressions flagged{history}")
