"""pull_weights: the run's Hugging Face weights folder (titanflow.weights.resolve), the embedded ones built by
the two tasks it calls; all three cached (titanflow.prefect_ops.caching)."""

from __future__ import annotations

from prefect import task
from prefect.logging import get_run_logger

from titanflow.assets import TINY_SPECS, ensure_assets
from titanflow.hub_id import is_hub_id
from titanflow.prefect_ops import caching
from titanflow.prefect_ops.hub_token import token_for
from titanflow.run.pretrained import ensure_pretrained
from titanflow.task_names import TaskName
from titanflow.tasks.retry import retry_transient_download
from titanflow.weights.resolve import resolve_weights


@task(name=TaskName.build_tiny_weights, cache_policy=caching.BUILD_TINY_WEIGHTS, persist_result=True)
def build_tiny_weights(model_type: str) -> str:
    """Prefect task: the embedded tiny model of ``model_type`` (titanflow.assets.ensure_assets); its folder."""
    return str(ensure_assets(spec=TINY_SPECS[model_type]).weights_dir.resolve())


@task(name=TaskName.build_pretrained_weights, cache_policy=caching.BUILD_PRETRAINED_WEIGHTS, persist_result=True)
def build_pretrained_weights(model_type: str) -> str:
    """Prefect task: its pretrained checkpoint (titanflow.run.pretrained, minutes when built); its folder."""
    return str(ensure_pretrained(model_type=model_type).resolve())


@task(name=TaskName.pull_weights, retries=2, retry_delay_seconds=10, retry_condition_fn=retry_transient_download,
      cache_policy=caching.PULL_WEIGHTS, persist_result=True)
def pull_weights(weights: str | None, init: str, model_type: str = "qwen3") -> str:
    """Prefect task: :func:`titanflow.weights.resolve.resolve_weights`; returns the folder as a string.

    For a Hub id the token is looked up here (:func:`titanflow.prefect_ops.hub_token.hub_token`) and
    only its source is logged. Retried twice, 10 s apart, for transient download failures only.
    """
    logger = get_run_logger()
    if weights is None:
        folder = (build_pretrained_weights if init == "pretrained" else build_tiny_weights)(model_type)
    else:
        token = token_for(weights)
        if is_hub_id(weights):
            logger.info("Hub token: %s", f"from {token.source}" if token else "none (public repos only)")
        folder = resolve_weights(weights, token=token)
    logger.info("weights folder: %s", folder)
    return str(folder)
