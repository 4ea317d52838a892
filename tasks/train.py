"""train: the rendered job under torchrun (titanflow.launch.torchrun), holding nothing else."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titan_cfg.job import Job
from titanflow.launch.metrics import strip_ansi
from titanflow.launch.render import RenderedJob
from titanflow.launch.resume import prepare
from titanflow.prefect_ops.slot import node_slots
from titanflow.launch.torchrun import run_training
from titanflow.prefect_ops import caching
from titanflow.report.artifacts import TrainingProgress, artifact_key
from titanflow.results import TrainResult
from titanflow.task_names import TaskName
from titanflow.tasks.retry import retry_infrastructure_only


@task(name=TaskName.train, retries=2, retry_delay_seconds=10, retry_condition_fn=retry_infrastructure_only,
      cache_policy=caching.TRAIN, persist_result=True)
def train(rendered: RenderedJob, timeout_s: float) -> TrainResult:
    """Prefect task: :func:`titanflow.launch.torchrun.run_training`, its output lines forwarded to the run log
    (one record per batch of lines, titanflow.launch.forward) and each step advancing the ``<key>-progress``
    artifact; a Slurm job trains holding the training
    slots of its nodes.

    Retried twice, 10 s apart, only for an infrastructure failure (a killed or timed-out
    launch, a taken port: :func:`titanflow.tasks.retry.retry_infrastructure_only`); a retry resumes from the
    newest complete step checkpoint (titanflow.launch.resume), and its progress goes on from there.
    A NaN or infinite loss fails as numerics and is never retried.

    A training that finished is cached for its own run folder (titanflow.prefect_ops.caching.TRAIN): a retried
    flow run or a resumed run whose export or a later task failed goes on from there without training again.
    """
    logger = get_run_logger()
    job = Job.read(Path(rendered.job_path))
    # a Slurm job holds the training slots of its nodes' hosts while it trains (titanflow.prefect_ops.slot.node_slots)
    hold_nodes = (lambda hosts: node_slots(hosts, run_id=job.run_id)) if rendered.scheduler == "slurm" else None
    resume = prepare(job, Path(rendered.run_dir) / "train.log")
    with TrainingProgress(artifact_key(job.model_dump()), job.steps, job.run_id,
                          resumed_from_step=resume.resumed_from_step) as progress:

        def on_lines(lines: list[str]) -> None:
            logger.info("\n".join(map(strip_ansi, lines)))  # one Prefect log record per batch of lines
            progress.on_lines(lines)

        return run_training(rendered, timeout_s=timeout_s, on_lines=on_lines, resume=resume, hold_nodes=hold_nodes)
