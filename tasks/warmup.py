"""compile_warmup: one compiled step into the keyed compile cache (titanflow.launch.warmup)."""

from __future__ import annotations

from prefect import task
from prefect.logging import get_run_logger

from titanflow.launch.render import RenderedJob
from titanflow.launch.warmup import WarmupResult, warm_up
from titanflow.run.task_names import TaskName


@task(name=TaskName.compile_warmup)
def compile_warmup(rendered: RenderedJob, timeout_s: float) -> WarmupResult:
    """Prefect task: :func:`titanflow.launch.warmup.warm_up`, logging the outcome."""
    logger = get_run_logger()
    result = warm_up(rendered, timeout_s, on_line=logger.info)
    logger.info("compile warm-up %s: %s (%.1f s)", result.status, result.reason, result.seconds)
    return result
