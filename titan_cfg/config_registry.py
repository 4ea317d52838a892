"""torchtitan config registry for titanflow jobs.

Run as ``torchrun ... -m titan_cfg.entry --module titan_cfg.config_registry
--config titanflow_job`` with ``$TITANFLOW_JOB`` naming a rendered job.json.
"""

from titan_cfg import trainer_config
from titan_cfg.job import Job


def titanflow_job():
    """``Trainer.Config`` of the job file named by ``$TITANFLOW_JOB``."""
    return trainer_config.build(Job.read())
