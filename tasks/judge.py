"""compare_loss: the first-step loss verdict (titanflow.judge.loss)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titan_cfg.job import Job
from titanflow.judge.expectations import wants_independent
from titanflow.judge.first_step import independent_first_step_loss
from titanflow.judge.loss import judge
from titanflow.params import ScenarioRun
from titanflow.results import LossVerdict
from titanflow.task_names import TaskName


@task(name=TaskName.compare_loss)
def compare_loss(losses: list[float], job_path: str, run: ScenarioRun, environment: dict | None = None,
                 stack_digest: str | None = None) -> LossVerdict:
    """Prefect task: :func:`titanflow.judge.loss.judge` on the job's model shape, logging both numbers;
    for a pretrained run on a target that computes it, the independent expectation first
    (titanflow.judge.first_step); the published figure the job records (titan_cfg.published); the node baseline of
    the run's workload, found by its numerics ``environment`` and judged in its lane by ``stack_digest``."""
    logger = get_run_logger()
    job = Job.read(Path(job_path))
    independent = None
    if wants_independent(run):
        independent = independent_first_step_loss(Path(job.weights_dir), Path(job.dump_folder))
        logger.info("independent first-step expectation %.5f (%d tokens, %d ranks, %.1f s)", independent.loss,
                    independent.tokens, independent.ranks, independent.seconds)
    verdict = judge(losses, job.shape, run, independent=independent, published=job.published,
                    environment=environment, stack_digest=stack_digest)
    logger.info("first-step loss %.4f vs expected %.4f: %s (%s)", verdict.first_step_loss,
                verdict.expected_first_step_loss, verdict.verdict, verdict.reason)
    return verdict
