"""The config.json of the model a run trains, known before anything is downloaded, built or trained: the embedded
tiny model's fields (titanflow.assets), a local folder's or a Hub id's copy on this machine (titanflow.weights),
trimmed as the run's ``trim`` asks; and the trim checked against the checkpoint it cuts. Preflight checks a run
against them in milliseconds (titanflow.run.preflight, titanflow.run.disk).
"""

from __future__ import annotations

from titan_cfg.model_spec import read_config
from titan_cfg.scenarios import SCENARIOS
from titanflow.assets import TINY_SPECS
from titanflow.params import ScenarioRun
from titanflow.weights.resolve import local_copy
from titanflow.weights.trim import check_trim, trimmed_config


def embedded_config(run: ScenarioRun) -> dict:
    """The config.json fields of the run's embedded tiny model (titanflow.assets.TinySpec.config_fields), known
    without building it: preflight checks a run against them in milliseconds, and the flow's pull_weights builds the
    model (seconds on a fresh clone), whose folder render_config checks whole."""
    return TINY_SPECS[SCENARIOS[run.scenario].model_type].config_fields()


def trim_source_config(run: ScenarioRun) -> dict | None:
    """The config.json contents the run's ``trim`` cuts, when they are on this machine without downloading or
    building anything: the embedded tiny MoE's (:func:`embedded_config`, also the config of its pretrained
    checkpoint), a local folder's, or a Hub id's copy (titanflow.weights.resolve.local_copy); None otherwise (checked
    by the flow's trim step)."""
    if run.weights is None:
        return embedded_config(run)
    folder = local_copy(run.weights)
    return read_config(folder) if folder is not None else None


def trained_config(run: ScenarioRun) -> dict | None:
    """The config.json fields of the model the run trains, when they are on this machine without downloading or
    building anything (as :func:`trim_source_config`), trimmed as the run's ``trim`` asks; None otherwise."""
    config = trim_source_config(run)
    if config is None or run.trim is None:
        return config
    return trimmed_config(config, run.trim, source="", source_id=None)


def check_trim_fits(run: ScenarioRun) -> None:
    """``trim`` only removes from the model it is given: at most its layers, experts and experts per token
    (titanflow.weights.trim.check_trim against :func:`trim_source_config`).

    Raises:
        ValueError: ``trim: layers 5 > 4 (the checkpoint's) ...``, naming what to pass at most.
    """
    if run.trim is None:
        return
    config = trim_source_config(run)
    if config is None:
        return
    check_trim(config, run.trim)
