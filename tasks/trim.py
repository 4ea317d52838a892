"""trim_weights: the run's MoE weights trimmed, kept in the cache (titanflow.weights.trim)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titanflow import paths
from titanflow.params import Trim
from titanflow.task_names import TaskName
from titanflow.weights.identity import weights_id
from titanflow.weights.trim import ensure_trimmed


@task(name=TaskName.trim_weights)
def trim_weights(weights: str | None, weights_dir: str, trim: Trim, init: str = "pretrained") -> str:
    """Prefect task: :func:`titanflow.weights.trim.ensure_trimmed` of the pulled folder (the first run
    writes it, later runs reuse it); returns the trimmed folder. ``weights``: as the run names them,
    for the source's id; ``init``: the run's (pretrained: the source must hold its weights)."""
    source_id = weights_id(weights, Path(weights_dir))
    folder = ensure_trimmed(Path(weights_dir), trim, source_id, paths.cache_root(), init)
    get_run_logger().info("trimmed %s to %d layers, %d experts, top-%d: %s", source_id or weights_dir,
                          trim.layers, trim.experts, trim.top_k, folder)
    return str(folder)
