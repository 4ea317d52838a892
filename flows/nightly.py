"""The ``qwen3-nightly`` flow: every scenario of one target as ``qwen3-scenario`` subflows, one suite report.

    scenarios x inits -> qwen3-scenario (each judged against the history and appended to it) -> suite report

Subflows run one after another, and each holds its node's training slot (a Prefect
concurrency limit, titanflow.prefect_ops.slot) while it trains, so a deployment run started
by hand on the same node waits instead of sharing it. A failed scenario does not stop
the others. The suite ends Completed when every run passed, else Failed, its state
message saying how many failed and of which class; a cancelled run (a Prefect cancel, Ctrl-C:
verdict ``cancelled``) is counted apart, never as failed, and a suite whose only runs that did not
pass were cancelled ends Cancelled. Cancelling the suite itself cancels the run in progress and
publishes the report of the runs so far. Regressions that do not fail a run (slower, larger, on fewer consecutive
runs than fail one: "1 of 2") are counted as flagged, and so are runs whose history could not be recorded.
The markdown artifact ``nightly-<target>``
(titanflow.report.nightly: one SuiteRow per run) keeps one version per night. Each failed run is then compared with the last passing run of its
workload (tasks/compare.py: artifact ``<scenario>-<target>-<init>-compare``, a line in the report),
and the last 14 nights are drawn in the artifact ``trends-<target>`` (tasks/trends.py); then the runs folder's
retention policy is applied (tasks/prune.py, titanflow.record.retention). Any of them failing is logged, never the
suite's failure.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.logging import get_run_logger
from prefect.states import Cancelled, State

from titan_cfg.job import Init
from titanflow.flows.scenario import qwen3_scenario
from titanflow.params import ScenarioName, TargetName, new_run_id
from titanflow.prefect_ops.alerts import emit_regression_alert
from titanflow.prefect_ops.stopped import cancel_cause, cancelled_not_crashed
from titanflow.report.nightly import SuiteRow, outcome, suite_markdown, suite_state, total_flagged
from titanflow.run.nightly_plan import nightly_runs
from titanflow.tasks.compare import compare_last_pass
from titanflow.tasks.prune import prune
from titanflow.tasks.trends import trends


def _report_task(task, *args):
    """Run a reporting task (compare, trends) of the suite: its result, or None after logging why it
    failed; a report that cannot be made never fails the suite."""
    state = task(*args, return_state=True)
    if state.is_completed():
        return state.result()
    get_run_logger().warning("%s: %s", task.name, state.message)
    return None


def conclude(target: str, rows: list[SuiteRow]) -> State:
    """The suite's final state (titanflow.report.nightly.suite_state); a suite that flagged regressions
    without failing first emits the event of the regression alert (titanflow.prefect_ops.alerts)."""
    state = suite_state(rows)
    emit_regression_alert(target, state, flagged=total_flagged(rows))
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
            (titanflow.run.nightly_plan.nightly_runs).
    """
    logger = get_run_logger()
    rows: list[SuiteRow] = []

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
            rows.append(outcome(summary_path, Cancelled(message=cause), scenario=scenario, init=init, run_id=run_id))
            kept = f"; its record: {summary_path}" if summary_path.is_file() else ""
            logger.warning("%s/%s: cancelled (%s) in run %s%s; the suite stops at run %d of %d", scenario, init,
                           cause, run_id, kept, len(rows), len(suite))
            publish()
            raise
        row = outcome(summary_path, state, scenario=scenario, init=init, run_id=run_id)
        logger.info("%s/%s: %s %s", scenario, init, row.verdict, row.failure_class or "")
        rows.append(row)
    for row in rows:
        if row.verdict == "fail":
            row.compared = _report_task(compare_last_pass, row.run_id)
    publish()
    _report_task(trends, target, [r.run_id for r in rows])
    if suite:  # the runs folder's retention policy, once the night's runs are judged and recorded
        _report_task(prune, str(suite[0][1].runs_root()))
    return conclude(target, rows)
