"""canary: one side's installed stack and one side's ``qwen3-scenario`` run, in its profile's venv
(titanflow.canary.side_run)."""

from __future__ import annotations

from pathlib import Path

from prefect import Flow, task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from titanflow.canary.side_run import CanaryFolder, SideRun, run_side, side_stack
from titanflow.successor import CanarySide
from titanflow.task_names import TaskName


@task(name=TaskName.canary_stack, task_run_name="stack-{side.role}-{side.profile}", cache_policy=NO_CACHE)
def canary_stack(side: CanarySide, folder: str) -> dict:
    """Prefect task: :func:`titanflow.canary.side_run.side_stack` (never cached: a venv changes in place)."""
    return side_stack(side, CanaryFolder(Path(folder)))


@task(name=TaskName.canary_run, task_run_name="{side.role}-{side.profile}", cache_policy=NO_CACHE)
def canary_run(side: CanarySide, folder: str, parameters: dict, scenario_flow: Flow, api_url: str,
               timeout_s: float) -> SideRun:
    """Prefect task: :func:`titanflow.canary.side_run.run_side`, its flow run a subflow run of this task run (never
    cached: each side must run)."""
    run = run_side(side, CanaryFolder(Path(folder)), parameters, scenario_flow=scenario_flow, api_url=api_url,
                   timeout_s=timeout_s)
    ended = run.summary.verdict if run.summary else f"without a summary: {run.why}"
    get_run_logger().info("%s (%s): %s/%s ended %s (%.0f s)", side.role, side.profile, run.scenario, run.init, ended,
                          run.wall_s)
    return run
