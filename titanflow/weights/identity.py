"""Which published weights a run trains: the weights id the published figures are keyed by
(titan_cfg.published), recorded in job.json.

First found wins:

1. a folder trimmed by ``titanflow trim`` (titanflow.weights.trim): the id its config.json records
   (``titanflow_trim.weights_id``, the source's id with the trim in words), never the source's own,
   even when the run names the source by its Hub id;
2. ``weights`` given as a Hub id (``Qwen/Qwen3-4B-Instruct-2507``): that id, wherever its folder
   ended up (the HF cache, or ``$TITANFLOW_WEIGHTS_ROOT``: titanflow.weights.resolve);
3. a Hugging Face cache snapshot (``.../models--<org>--<name>/snapshots/<revision>``): ``<org>/<name>``;
4. config.json's ``_name_or_path`` when it is an id, not a path: what transformers' ``save_pretrained``
   writes for a model loaded from the Hub; add it to a folder downloaded with ``hf download --local-dir``
   (which keeps the published config.json, without it), or pass the Hub id and set
   ``$TITANFLOW_WEIGHTS_ROOT`` instead.

Otherwise None: the weights are the user's own and no published figure applies. An id says which
weights the folder claims to hold; a wrong claim shows as a first-step loss off the published figure.
"""

from __future__ import annotations

import json
from pathlib import Path

from titanflow.hub_id import is_hub_id

#: The config.json key ``titanflow trim`` records its trim under.
TRIM_KEY = "titanflow_trim"


def hub_cache_id(folder: Path) -> str | None:
    """``org/name`` of a Hugging Face cache snapshot folder (``models--org--name/snapshots/<rev>``), else None."""
    parts = Path(folder).parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/")
    return None


def weights_id(weights: str | None, folder: Path) -> str | None:
    """The weights id of a run given ``weights`` (as the user gave it) resolved to ``folder`` (module
    docstring); None when unknown. Reads only config.json."""
    config_path = Path(folder) / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    trim = config.get(TRIM_KEY)
    if isinstance(trim, dict) and trim.get("weights_id"):  # before the Hub id it was trimmed from
        return str(trim["weights_id"])
    if weights is not None and is_hub_id(weights):
        return weights
    cached = hub_cache_id(Path(folder))
    if cached:
        return cached
    named = config.get("_name_or_path")
    if isinstance(named, str) and named and is_hub_id(named) and "/" in named:
        return named
    return None
