"""pull_weights: the run's Hugging Face weights folder (titanflow.weights.resolve)."""

from __future__ import annotations

from prefect import task
from prefect.logging import get_run_logger

from tasks.retry import retry_transient_download
from titanflow.run.params import is_hub_id
from titanflow.run.task_names import TaskName
from titanflow.weights.resolve import hub_token, resolve_weights


@task(name=TaskName.pull_weights, retries=2, retry_delay_seconds=10, retry_condition_fn=retry_transient_download)
def pull_weights(weights: str | None, init: str, model_type: str = "qwen3") -> str:
    """Prefect task: :func:`titanflow.weights.resolve.resolve_weights`; returns the folder as a string.

    For a Hub id the token is looked up here (:func:`titanflow.weights.resolve.hub_token`) and
    only its source is logged. Retried twice, 10 s apart, for transient download failures only.
    """
    logger = get_run_logger()
    token = None
    if weights is not None and is_hub_id(weights):
        token = hub_token()
        logger.info("Hub token: %s", f"from {token.source}" if token else "none (public repos only)")
    folder = resolve_weights(weights, init, model_type, token=token)
    logger.info("weights folder: %s", folder)
    return str(folder)
