"""The ``qwen3-nightly`` flow: every scenario of one target as ``qwen3-scenario`` subflows, one suite report.

    scenarios x inits -> qwen3-scenario (each judged against the history and appended to it) -> suite report

Subflows run one after another, and each holds its node's training slot (a Prefect
concurrency limit, titanflow.launch.slot) while it trains, so a deployment run started
by hand on the same node waits instead of sharing it. A failed scenario does not stop
the others. The suite ends Completed when every run passed, else Failed, its state
message saying how many failed and of which class; regressions that do not fail a run
(slower, larger) are counted as flagged, and so are runs whose history could not be recorded.
The markdown artifact ``nightly-<target>``
keeps one version per night.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.logging import get_run_logger
from prefect.states import Completed, Failed, State

from flows.scenario import qwen3_scenario
from titan_cfg.job import Init
from titanflow.judge.failures import classify
from titanflow.run.params import ScenarioName, ScenarioRun, TargetName, nightly_suite
from titanflow.run.preflight import new_run_id
from titanflow.run.summary import read_summary


def outcome(summary_path: Path, state: State) -> dict:
    """One suite row from a finished subflow: its summary.json when it got that far, else its state."""
    if not summary_path.is_file():  # refused before any task ran (bad parameters)
        return {"verdict": "fail", "failure_class": "infrastructure", "reason": state.message, "flagged": 0,
                "history_error": None}
    summary = read_summary(summary_path)
    return {
        "verdict": summary.verdict or "fail",
        "failure_class": classify(summary) if summary.verdict != "pass" else None,
        "reason": summary.error or summary.reason or "",
        "first_step_loss": summary.loss.first_step_loss if summary.loss else None,
        "flagged": sum(1 for r in summary.regressions if r.finding_class != "numerics"),
        "history_error": summary.history_error,
    }


def suite_markdown(target: str, rows: list[dict]) -> str:
    """The nightly report: one line per scenario run, failures first explained."""
    failed = [r for r in rows if r["verdict"] != "pass"]
    lines = [f"# nightly on {target}: {len(rows) - len(failed)} of {len(rows)} passed", "",
             "| scenario | init | verdict | class | first-step loss | flagged | run |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        loss = f"{r['first_step_loss']:.4f}" if r.get("first_step_loss") is not None else "-"
        lines.append(f"| {r['scenario']} | {r['init']} | {r['verdict']} | {r['failure_class'] or ''} | {loss} | "
                     f"{r['flagged']} | {r['run_id']} |")
    for r in failed:
        lines += ["", f"- **{r['scenario']} / {r['init']}** ({r['failure_class']}): {str(r['reason'])[:500]}"]
    for r in rows:
        if r.get("history_error"):
            lines += ["", f"- **history not recorded** for {r['scenario']} / {r['init']}: {r['history_error'][:500]}"]
    return "\n".join(lines) + "\n"


@flow(name="qwen3-nightly")
def qwen3_nightly(
    target: TargetName = "cpu",
    scenarios: list[ScenarioName] | None = None,
    inits: list[Init] | None = None,
    steps: int | None = None,
    lr: float | None = None,
    runs_dir: str | None = None,
) -> State:
    """Run the suite of ``target`` (module docstring); ``steps``/``lr`` override every run's
    (None: ScenarioRun's defaults). Returns Completed, or Failed naming how many runs failed.

    Raises:
        ValueError: unknown scenario or init, before anything runs.
    """
    logger = get_run_logger()
    rows = []
    for scenario, init in nightly_suite(scenarios, inits):
        params = {k: v for k, v in dict(scenario=scenario, target=target, init=init, steps=steps, lr=lr,
                                        runs_dir=runs_dir).items() if v is not None}
        run = ScenarioRun(**params)
        run_id = new_run_id(run)
        state = qwen3_scenario(**params, run_id=run_id, return_state=True)
        row = {"scenario": scenario, "init": init, "run_id": run_id,
               **outcome(run.runs_root() / run_id / "summary.json", state)}
        logger.info("%s/%s: %s %s", scenario, init, row["verdict"], row["failure_class"] or "")
        rows.append(row)
    create_markdown_artifact(key=f"nightly-{target}", markdown=suite_markdown(target, rows),
                             description=f"nightly suite on {target}")
    failed = [r for r in rows if r["verdict"] != "pass"]
    flagged = sum(r["flagged"] for r in rows)
    unrecorded = sum(1 for r in rows if r.get("history_error"))
    history = f"; history not recorded for {unrecorded} run(s)" if unrecorded else ""
    if failed:
        classes = ", ".join(sorted({f"{r['failure_class']}" for r in failed}))
        return Failed(message=f"{len(failed)} of {len(rows)} scenario runs failed ({classes}); {flagged} flagged"
                              f"{history}")
    return Completed(message=f"{len(rows)} of {len(rows)} scenario runs passed; {flagged} regressions flagged{history}")
