"""Per-target compatibility layers applied before torchtitan is imported.

Each target that needs torchtitan changed to run gets one module here; the
torchrun entry module (:mod:`titan_cfg.entry`) calls :func:`apply` with the job's
target before it imports the trainer. Targets that run torchtitan as upstream
intends (``cuda``) or through their own fork (``trn2``: torchtitan-neuron) need none.
"""

from __future__ import annotations

from typing import Callable

from titan_cfg.compat import cpu

#: target name -> function that patches torchtitan in this process.
LAYERS: dict[str, Callable[[], list[str]]] = {"cpu": cpu.apply}


def apply(target: str) -> list[str]:
    """Apply ``target``'s compat layer; return the names of the patches applied (maybe none)."""
    layer = LAYERS.get(target)
    return layer() if layer else []
