"""torchtitan config registry for titanflow jobs.

Run as ``torchrun ... -m titan_cfg.entry --module titan_cfg.config_registry
--config titanflow_job`` with ``$TITANFLOW_JOB`` naming a rendered job.json.
"""

from titan_cfg import trainer_config
from titan_cfg.job import Job


def titanflow_job():
    """``Trainer.Config`` of the job file named by ``$TITANFLOW_JOB``.

    Raises:
        RuntimeError: the job was rendered files-only (``titanflow render``): its weights folder was
            checked for config.json alone, so a pretrained load could silently train from random init.
    """
    job = Job.read()
    if job.files_only:
        raise RuntimeError(f"{job.run_id}: rendered files-only by `titanflow render`, not to run; launch it with "
                           "`titanflow run` or a deployment, which check the weights folder and dataset first")
    return trainer_config.build(job)
