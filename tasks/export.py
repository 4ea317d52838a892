"""export: the run's Hugging Face folder (titanflow.export.assemble)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger

from titan_cfg.job import Job
from titanflow.export.assemble import export_run
from titanflow.results import ExportResult
from titanflow.task_names import TaskName


@task(name=TaskName.export)
def export(job_path: str, run_dir: str) -> ExportResult:
    """Prefect task: :func:`titanflow.export.assemble.export_run`, logging the folder's files."""
    result = export_run(Job.read(Path(job_path)), Path(run_dir))
    logger = get_run_logger()
    logger.info("export: %s (%s)", result.export_dir, ", ".join(sorted(p.name for p in Path(result.export_dir).iterdir())))
    if result.untied_lm_head:
        logger.warning("training untied lm_head from the embedding; the export carries the trained head, untied")
    return result
