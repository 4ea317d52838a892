"""probe: one revision's ``qwen3-scenario`` run for the bisect, in its own worktree (titanflow.bisect.probe)."""

from __future__ import annotations

from pathlib import Path

from prefect import Flow, runtime, task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from titanflow.bisect.probe import BisectFolder, ProbeRun, run_probe
from titanflow.task_names import TaskName


def probe_run_name() -> str:
    """``probe-<label>`` (a bisect over environments: ``env-<k>``), else ``probe-<12 hex of the revision>``."""
    given = runtime.task_run.parameters
    return f"probe-{given.get('label') or given['revision'][:12]}"


@task(name=TaskName.probe, task_run_name=probe_run_name, cache_policy=NO_CACHE)
def probe(repo: str, revision: str, folder: str, parameters: dict, scenario_flow: Flow, api_url: str,
          timeout_s: float, label: str | None = None, pins: dict[str, str] | None = None,
          pip_options: list[str] | None = None) -> ProbeRun:
    """Prefect task: :func:`titanflow.bisect.probe.run_probe` of ``revision`` (``label``, ``pins``,
    ``pip_options``: one environment of a bisect over environments), its flow run a subflow run of this task run
    (never cached: each probe must run)."""
    run = run_probe(Path(repo), revision, BisectFolder(Path(folder)), parameters, scenario_flow=scenario_flow,
                    api_url=api_url, timeout_s=timeout_s, label=label, pins=pins, pip_options=pip_options)
    ended = run.summary.verdict if run.summary else f"without a summary: {run.why}"
    get_run_logger().info("probe %s: run %s ended %s (%.0f s, %s)", label or revision[:12], run.run_id, ended, run.wall_s,
                          run.environment)
    return run
