"""render_config: the run's job folder (titanflow.launch.render), torchtitan's config of the job built by the task
it calls, ``torchtitan_config``, cached across run ids (titanflow.prefect_ops.caching)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from titan_cfg.job import Job
from titanflow.launch.render import RenderedJob, build_config, render
from titanflow.params import ScenarioRun
from titanflow.prefect_ops import caching
from titanflow.task_names import TaskName


@task(name=TaskName.torchtitan_config, cache_policy=caching.TORCHTITAN_CONFIG, persist_result=True)
def torchtitan_config(job: Job, env: dict[str, str]) -> dict:
    """Prefect task: :func:`titanflow.launch.render.build_config` of a job without its run (the same for every
    run id: :func:`titanflow.launch.render.without_run`), about 5 s of torchtitan import the first time in a
    process. ``env``, the ranks' environment, is part of the cache key only: its ``PYTHONPATH`` names the
    libraries (a layered transformers) the config is built with, which are this process's own."""
    return build_config(job)


@task(name=TaskName.render_config, cache_policy=caching.RENDER_CONFIG, persist_result=True)
def render_config(run: ScenarioRun, weights_dir: str, run_dir: str) -> RenderedJob:
    """Prefect task: :func:`titanflow.launch.render.render` (job.json, launch line, torchtitan config) into the run
    folder; cached per run folder, so a resumed or retried run keeps its job files as they are."""
    return render(run, Path(weights_dir), Path(run_dir), trainer_config=torchtitan_config)
