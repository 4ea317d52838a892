"""Compatibility layers applied in the ranks before torchtitan's trainer runs.

A layer is one module here with an ``apply()`` that patches torchtitan (or transformers) in the
process and returns the names of the patches it applied. The torchrun entry module
(:mod:`titan_cfg.entry`) applies the layer named like the job's node type (titan_cfg.targets.Target.node:
``cpu``; node types that run torchtitan as upstream intends, ``cuda``, or through their own fork, ``trn2``:
torchtitan-neuron, need none), then the layers the scenario names (``Scenario.compat``).
"""

from __future__ import annotations

from typing import Callable

from titan_cfg.compat import cpu, hf_backend

def _hf_backend() -> list[str]:
    cpu.make_importable_without_triton()  # the layer imports torchtitan's transformers backend
    return hf_backend.apply()


#: layer name (a target's, or one a scenario names) -> function that patches this process.
LAYERS: dict[str, Callable[[], list[str]]] = {"cpu": cpu.apply, "hf_backend": _hf_backend}


def apply(target: str, scenario_layers: tuple[str, ...] = ()) -> list[str]:
    """Apply ``target``'s layer, if it has one, then each of ``scenario_layers``; return the names
    of the patches applied (maybe none).

    Raises:
        KeyError: a scenario names a layer that does not exist.
    """
    applied = LAYERS[target]() if target in LAYERS else []
    for name in scenario_layers:
        applied += LAYERS[name]()
    return applied
