"""prune: the runs folder's retention policy applied after a nightly's suite (titanflow.record.retention)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titanflow.record import retention
from titanflow.task_names import TaskName


@task(name=TaskName.prune)
def prune(runs_dir: str) -> int:
    """Prefect task: apply the retention policy to ``runs_dir`` (titanflow.record.retention.plan, then apply);
    returns the bytes freed, each run that lost something logged with what and why."""
    logger = get_run_logger()
    going = [d for d in retention.plan(Path(runs_dir)) if d.action != "keep"]
    freed = retention.apply(going)
    for decision in going:
        logger.info("prune: %s lost %s (%s)", decision.run_dir.name, ", ".join(p.name for p in decision.paths),
                    decision.why)
    logger.info("prune: freed %.2f GiB from %d run(s) of %s", freed / 2**30, len(going), runs_dir)
    return freed
