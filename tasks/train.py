"""train: launch the rendered job with torchrun and measure it.

Writes ``runs/<id>/train.log`` (rank 0, streamed live to the Prefect run log),
``runs/<id>/train/ranks/`` (every rank's own log, from torchrun ``--log-dir``)
and ``runs/<id>/metrics.csv`` (step, loss, grad_norm, memory_gib, tps).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger
from pydantic import BaseModel

from tasks.config import RenderedJob
from titan_cfg.job import Job
from titanflow import paths
from titanflow.artifacts import TrainingProgress, artifact_key
from titanflow.failures import non_finite_steps, retry_infrastructure_only
from titanflow.metrics import metrics_table, strip_ansi
from titanflow.process import run_streaming


class TrainingError(RuntimeError):
    """torchrun failed, timed out, or logged no step; the message carries the log tail."""


class TrainResult(BaseModel):
    """Summary of a finished training launch (losses in nats, one per step, rank 0)."""

    log_path: str
    metrics_path: str
    losses: list[float]
    tokens_per_s: float        # all ranks: median per-rank tps over steps >= 2, times world size
    peak_memory_gib: float     # largest per-rank peak torchtitan reported
    peak_rss_bytes: int        # largest resident set of any process of the launch
    wall_s: float


def resolve_launcher(argv: list[str]) -> list[str]:
    """Replace a bare ``torchrun`` by the one installed next to this Python (the project venv)."""
    local = Path(sys.executable).parent / argv[0]
    return [str(local) if local.exists() else (shutil.which(argv[0]) or argv[0]), *argv[1:]]


def launch(rendered: RenderedJob, *, timeout_s: float, log_name: str = "train.log", on_line=lambda _: None,
           extra_env: dict[str, str] | None = None):
    """Run the rendered torchrun line, each output line to ``on_line``; returns (ProcessResult, log path)."""
    log_path = Path(rendered.run_dir) / log_name
    result = run_streaming(
        resolve_launcher(rendered.argv),
        env={**os.environ, **rendered.env, **(extra_env or {})},
        log_path=log_path, timeout_s=timeout_s, on_line=on_line, cwd=paths.REPO_ROOT,
    )
    return result, log_path


def run_training(rendered: RenderedJob, *, timeout_s: float, world_size: int, on_line=lambda _: None) -> TrainResult:
    """Launch, then parse the metrics table.

    Raises:
        TrainingError: non-zero exit, timeout, or no step line logged (message has the log tail).
    """
    lines: list[str] = []
    metrics_path = Path(rendered.run_dir) / "metrics.csv"

    def keep(line: str) -> None:
        lines.append(line)
        on_line(line)

    try:
        result, log_path = launch(rendered, timeout_s=timeout_s, on_line=keep)
    finally:  # interrupted or not, the steps that ran are kept
        table = metrics_table(lines)
        table.to_csv(metrics_path, index=False)
    if result.timed_out or result.returncode != 0 or table.empty:
        why = (f"timed out after {timeout_s:.0f} s" if result.timed_out
               else f"torchrun exited {result.returncode}" if result.returncode else "no training step was logged")
        tail = "\n".join(result.tail[-25:])
        raise TrainingError(f"train: {why}; full log {log_path}\n--- last lines ---\n{tail}")
    later = table[table.step >= 2].tps
    per_rank_tps = float(later.median()) if len(later) else float(table.tps.iloc[0])
    return TrainResult(
        log_path=str(log_path),
        metrics_path=str(metrics_path),
        losses=[float(x) for x in table.loss],
        tokens_per_s=per_rank_tps * world_size,
        peak_memory_gib=float(table.memory_gib.max()),
        peak_rss_bytes=result.peak_rss_bytes,
        wall_s=result.wall_s,
    )


@task(name="train", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_infrastructure_only)
def train(rendered: RenderedJob, timeout_s: float, world_size: int) -> TrainResult:
    """Prefect task: :func:`run_training`, each output line forwarded to the run log and each
    step advancing the ``<key>-progress`` artifact (``titanflow.artifacts.TrainingProgress``).

    Retried twice, 10 s apart, only for an infrastructure failure (a killed or
    timed-out launch, a taken port: ``titanflow.failures.retry_infrastructure_only``).
    A NaN or infinite loss fails as numerics and is never retried: torchtitan stops
    at one on the steps it logs ("Loss is not finite"), and any that reaches here raises.
    """
    logger = get_run_logger()
    job = Job.read(Path(rendered.job_path))
    with TrainingProgress(artifact_key(job.model_dump()), job.steps, job.run_id) as progress:

        def on_line(line: str) -> None:
            logger.info(strip_ansi(line))
            progress.on_line(line)

        result = run_training(rendered, timeout_s=timeout_s, world_size=world_size, on_line=on_line)
    bad_steps = non_finite_steps(result.losses)
    if bad_steps:  # a diverged model is not exported
        raise TrainingError(f"train: non-finite loss at steps {bad_steps}; full log {result.log_path}")
    return result
