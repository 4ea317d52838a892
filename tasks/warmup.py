"""compile_warmup: one compiled step into the keyed compile cache (titanflow.launch.warmup), cached
(titanflow.prefect_ops.caching)."""

from __future__ import annotations

from prefect import task
from prefect.logging import get_run_logger

from titanflow.launch.render import RenderedJob
from titanflow.launch.warmup import warm_up
from titanflow.prefect_ops import caching
from titanflow.results import WarmupResult
from titanflow.task_names import TaskName


@task(name=TaskName.compile_warmup, cache_policy=caching.COMPILE_WARMUP, persist_result=True)
def compile_warmup(rendered: RenderedJob, timeout_s: float) -> WarmupResult:
    """Prefect task: :func:`titanflow.launch.warmup.warm_up`, logging the outcome. Cached on the job without its
    run and the compile cache it fills, so a run of the same job reuses the result while the cache is warm."""
    logger = get_run_logger()
    result = warm_up(rendered, timeout_s, on_lines=lambda lines: logger.info("\n".join(lines)))
    logger.info("compile warm-up %s: %s (%.1f s)", result.status, result.reason, result.seconds)
    return result
