"""probe: one revision's ``qwen3-scenario`` run for the bisect, in its own worktree (titanflow.bisect.probe)."""

from __future__ import annotations

from pathlib import Path

from prefect import Flow, task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from titanflow.bisect.probe import BisectFolder, ProbeRun, run_probe
from titanflow.task_names import TaskName


@task(name=TaskName.probe, task_run_name="probe-{revision:.12}", cache_policy=NO_CACHE)
def probe(repo: str, revision: str, folder: str, parameters: dict, scenario_flow: Flow, api_url: str,
          timeout_s: float) -> ProbeRun:
    """Prefect task: :func:`titanflow.bisect.probe.run_probe` of ``revision``, its flow run a subflow run of
    this task run (never cached: each probe must run)."""
    run = run_probe(Path(repo), revision, BisectFolder(Path(folder)), parameters, scenario_flow=scenario_flow,
                    api_url=api_url, timeout_s=timeout_s)
    ended = run.summary.verdict if run.summary else f"without a summary: {run.why}"
    get_run_logger().info("probe %s: run %s ended %s (%.0f s, %s)", revision[:12], run.run_id, ended, run.wall_s,
                          run.environment)
    return run
