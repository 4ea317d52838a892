"""A run's ``weights`` as given: a path on this machine, or a Hugging Face Hub id (``org/name``).

Told apart from the text and the file system alone (nothing is downloaded or read): the run's parameters refuse a
``weights`` that is neither (titanflow.params), and the weights' resolution (titanflow.weights.resolve), their id
(titanflow.weights.identity), the checks before compute (titanflow.run.preflight, titanflow.run.checks) and the
flow's pull (tasks/weights.py) each take a Hub id to the Hub or its local copy.
"""

from __future__ import annotations

import os
import re


def looks_like_path(weights: str) -> bool:
    """A Hub id is ``name`` or ``org/name``; anything absolute, relative-dotted or deeper is a path, and so is a name
    that is a file or folder here (``README.md``, ``models/tiny``)."""
    return weights.startswith(("/", ".", "~")) or weights.count("/") > 1 or os.path.exists(weights)


def is_hub_id(weights: str) -> bool:
    """True for ``org/name``-style ids (what ``huggingface_hub.snapshot_download`` takes)."""
    return not looks_like_path(weights) and re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?", weights) is not None
