"""The ``qwen3-nightly`` flow: every scenario of one target as ``qwen3-scenario`` subflows, one suite report.

    scenarios x inits -> qwen3-scenario (each judged against the history and appended to it) -> suite report

Subflows run one after another, and each holds its node's training slot (a Prefect
concurrency limit, titanflow.launch.slot) while it trains, so a deployment run started
by hand on the same node waits instead of sharing it. A failed scenario does not stop
the others. The suite ends Completed when every run passed, else Failed, its state
message saying how many failed and of which class; a cancelled run (a Prefect cancel, Ctrl-C:
verdict ``cancelled``) is counted apart, never as failed, and a suite whose only runs that did not
pass were cancelled ends Cancelled. Cancelling the suite itself cancels the run in progress and
publishes the report of the runs so far. Regressions that do not fail a run (slower, larger) are
counted as flagged, and so are runs whose history could not be recorded.
The markdown artifact ``nightly-<target>``
keeps one version per night. Each failed run is then compared with the last passing run of its
workload (tasks/compare.py: artifact ``<scenario>-<target>-<init>-compare``, a line in the report),
and the last 14 nights are drawn in the artifact ``trends-<target>`` (tasks/trends.py); either
failing is logged, never the suite's failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.logging import get_run_logger
from prefect.states import Cancelled, Completed, Failed, State

from flows.scenario import qwen3_scenario
from tasks.compare import compare_last_pass
from tasks.trends import trends
from titan_cfg.job import Init
from titanflow.params import ScenarioName, TargetName, nightly_runs
from titanflow.prefect_ops.alerts import emit_regression_alert
from titanflow.prefect_ops.stopped import cancel_cause, cancelled_not_crashed
from titanflow.record.summary import classify, read_summary
from titanflow.run.preflight import new_run_id


def outcome(summary_path: Path, state: State) -> dict:
    """One suite row from a finished subflow: its summary.json when it got that far, else its state
    (cancelled before any task, or refused on bad parameters: a failure of class infrastructure)."""
    if not summary_path.is_file():
        if state.is_cancelled():
            return {"verdict": "cancelled", "failure_class": None, "reason": state.message, "flagged": 0,
                    "history_error": None}
        return {"verdict": "fail", "failure_class": "infrastructure", "reason": state.message, "flagged": 0,
                "history_error": None}
    summary = read_summary(summary_path)
    return {
        "verdict": summary.verdict or "fail",
        "failure_class": classify(summary) if summary.verdict != "pass" else None,
        "reason": summary.error or summary.reason or "",  # a cancelled run's reason says how and where
        "first_step_loss": summary.loss.first_step_loss if summary.loss else None,
        "flagged": sum(1 for r in summary.regressions if r.finding_class != "numerics"),
        "history_error": summary.history_error,
    }


def _count(rows: list[dict]) -> tuple[list[dict], list[dict], int]:
    """(failed rows, cancelled rows, how many passed); a run that did not pass and was not cancelled failed."""
    cancelled = [r for r in rows if r["verdict"] == "cancelled"]
    failed = [r for r in rows if r["verdict"] not in ("pass", "cancelled")]
    return failed, cancelled, len(rows) - len(failed) - len(cancelled)


def suite_markdown(target: str, rows: list[dict]) -> str:
    """The nightly report: one line per scenario run, failures then cancels explained."""
    failed, cancelled, passed = _count(rows)
    apart = f", {len(cancelled)} cancelled" if cancelled else ""
    lines = [f"# nightly on {target}: {passed} of {len(rows)} passed, {len(failed)} failed{apart}", "",
             "| scenario | init | verdict | class | first-step loss | flagged | run |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        loss = f"{r['first_step_loss']:.4f}" if r.get("first_step_loss") is not None else "-"
        lines.append(f"| {r['scenario']} | {r['init']} | {r['verdict']} | {r['failure_class'] or ''} | {loss} | "
                     f"{r['flagged']} | {r['run_id']} |")
    for r in failed:
        lines += ["", f"- **{r['scenario']} / {r['init']}** ({r['failure_class']}): {str(r['reason'])[:500]}"]
        if r.get("compared"):
            lines.append(f"  - against the last passing run: {r['compared']}")
    for r in cancelled:
        lines += ["", f"- **{r['scenario']} / {r['init']}** cancelled, not failed: {str(r['reason'])[:500]}"]
    for r in rows:
        if r.get("history_error"):
            lines += ["", f"- **history not recorded** for {r['scenario']} / {r['init']}: {r['history_error'][:500]}"]
    return "\n".join(lines) + "\n"


def suite_state(rows: list[dict]) -> State:
    """The suite's final state: Completed when every run passed; Failed when any failed (the message
    names how many and their classes); otherwise, when runs were cancelled, Cancelled. Each message
    counts cancelled runs apart and says how many regressions were flagged and histories not recorded."""
    failed, cancelled, passed = _count(rows)
    flagged = sum(r["flagged"] for r in rows)
    unrecorded = sum(1 for r in rows if r.get("history_error"))
    history = f"; history not recorded for {unrecorded} run(s)" if unrecorded else ""
    apart = f"; {len(cancelled)} cancelled" if cancelled else ""
    if failed:
        classes = ", ".join(sorted({f"{r['failure_class']}" for r in failed}))
        return Failed(message=f"{len(failed)} of {len(rows)} scenario runs failed ({classes}){apart}; "
                              f"{flagged} flagged{history}")
    if cancelled:
        return Cancelled(message=f"{passed} of {len(rows)} scenario runs passed{apart}; {flagged} regressions "
                                 f"flagged{history}")
    return Completed(message=f"{len(rows)} of {len(rows)} scenario runs passed; {flagged} regressions flagged{history}")


def _report_task(task, *args):
    """Run a reporting task (compare, trends) of the suite: its result, or None after logging why it
    failed; a report that cannot be made never fails the suite."""
    state = task(*args, return_state=True)
    if state.is_completed():
        return state.result()
    get_run_logger().warning("%s: %s", task.name, state.message)
    return None


def conclude(target: str, rows: list[dict]) -> State:
    """The suite's final state (:func:`suite_state`); a suite that flagged regressions without failing
    first emits the event of the regression alert (titanflow.prefect_ops.alerts)."""
    state = suite_state(rows)
    emit_regression_alert(target, state, flagged=sum(r["flagged"] for r in rows))
    return state


@flow(name="qwen3-nightly", on_crashed=[cancelled_not_crashed])
def qwen3_nightly(
    target: TargetName = "cpu",
    scenarios: list[ScenarioName] | None = None,
    inits: list[Init] | None = None,
    steps: int | None = None,
    lr: float | None = None,
    runs_dir: str | None = None,
    scheduler: Literal["slurm", "kubernetes"] | None = None,
) -> State:
    """Run the suite of ``target`` (module docstring); ``steps``/``lr``/``scheduler`` override every run's
    (None: ScenarioRun's defaults; ``scheduler`` kubernetes: the suite's runs train on the pods of the Kubernetes job
    this flow runs in, titanflow.launch.kubernetes). Returns :func:`suite_state`: Completed, Failed naming how many runs
    failed, or Cancelled when runs were cancelled and none failed.

    Raises:
        ValueError: unknown scenario or init, or a parameter no run can take, before anything runs
            (titanflow.params.nightly_runs).
    """
    logger = get_run_logger()
    rows = []

    def publish() -> None:
        create_markdown_artifact(key=f"nightly-{target}", markdown=suite_markdown(target, rows),
                                 description=f"nightly suite on {target}")

    suite = nightly_runs(target, scenarios, inits, steps=steps, lr=lr, runs_dir=runs_dir, scheduler=scheduler)
    for params, run in suite:
        scenario, init = run.scenario, run.init
        run_id = new_run_id(run)
        summary_path = run.runs_root() / run_id / "summary.json"
        try:
            state = qwen3_scenario(**params, run_id=run_id, return_state=True)
        except BaseException as err:  # the suite itself cancelled (SIGTERM, Ctrl-C): report what ran, then stop
            cause = cancel_cause(err)
            if cause is None:
                raise
            rows.append({"scenario": scenario, "init": init, "run_id": run_id,
                         **outcome(summary_path, Cancelled(message=cause))})
            kept = f"; its record: {summary_path}" if summary_path.is_file() else ""
            logger.warning("%s/%s: cancelled (%s) in run %s%s; the suite stops at run %d of %d", scenario, init,
                           cause, run_id, kept, len(rows), len(suite))
            publish()
            raise
        row = {"scenario": scenario, "init": init, "run_id": run_id, **outcome(summary_path, state)}
        logger.info("%s/%s: %s %s", scenario, init, row["verdict"], row["failure_class"] or "")
        rows.append(row)
    for row in rows:
        if row["verdict"] == "fail":
            row["compared"] = _report_task(compare_last_pass, row["run_id"])
    publish()
    _report_task(trends, target, [r["run_id"] for r in rows])
    return conclude(target, rows)
