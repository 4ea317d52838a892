"""trends: the ``trends-<target>`` artifact after a nightly (titanflow.report.trends)."""

from __future__ import annotations

from prefect import task
from prefect.logging import get_run_logger

from titanflow.judge.trends import DEFAULT_NIGHTS
from titanflow.report.trends import nightly_trends
from titanflow.task_names import TaskName


@task(name=TaskName.trends)
def trends(target: str, run_ids: list[str], nights: int = DEFAULT_NIGHTS) -> str | None:
    """Prefect task: :func:`titanflow.report.trends.nightly_trends`; returns the PNG's path, None when the
    history has no run of ``target``."""
    png = nightly_trends(target, run_ids, nights)
    get_run_logger().info("trends-%s: %s", target, png or "no run of this target in the history")
    return str(png) if png else None
