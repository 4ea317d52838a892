"""compare_loss: the first-step loss verdict (titanflow.judge.loss)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titan_cfg.job import Job
from titanflow.judge.loss import LossVerdict, judge
from titanflow.run.params import ScenarioRun
from titanflow.run.task_names import TaskName


@task(name=TaskName.compare_loss)
def compare_loss(losses: list[float], job_path: str, run: ScenarioRun) -> LossVerdict:
    """Prefect task: :func:`titanflow.judge.loss.judge` on the job's model shape, logging both numbers."""
    verdict = judge(losses, Job.read(Path(job_path)).shape, run)
    get_run_logger().info("first-step loss %.4f vs expected %.4f: %s (%s)", verdict.first_step_loss,
                          verdict.expected_first_step_loss, verdict.verdict, verdict.reason)
    return verdict
