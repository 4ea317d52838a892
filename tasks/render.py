"""render_config: the run's job folder (titanflow.launch.render)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from titanflow.launch.render import RenderedJob, render
from titanflow.run.params import ScenarioRun
from titanflow.run.task_names import TaskName


@task(name=TaskName.render_config)
def render_config(run: ScenarioRun, weights_dir: str, run_dir: str) -> RenderedJob:
    """Prefect task: :func:`titanflow.launch.render.render` (job.json, launch line, torchtitan config)."""
    return render(run, Path(weights_dir), Path(run_dir))
