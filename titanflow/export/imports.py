"""The libraries the export's checks import (torch, transformers' Qwen3 models, safetensors, and torchtitan's Qwen3
models where the round trip runs), imported ahead on a thread of their own while training runs, so that
``validate`` starts checking instead of importing (8-9 s of imports in the flow process, which otherwise sits idle
through training).

Why a thread and not a process: the imports are for the flow process itself. Python's import lock makes it safe:
a task that imports a module the thread is still importing waits for it, then finds it imported. On a machine
whose cores training leaves idle this is time saved; where training takes every core (2 cores, 2 ranks) the
imports compete with it (benchmarks/overhead.py measures both).
"""

from __future__ import annotations

import importlib
import threading

#: What the checks import (titanflow.export.structure, load, parity), heaviest first.
MODULES = ("torch", "transformers", "transformers.models.qwen3.modeling_qwen3",
           "transformers.models.qwen3_moe.modeling_qwen3_moe", "safetensors.torch")
#: What the round trip (titanflow.export.roundtrip) imports besides: torchtitan's Qwen3 models, which
#: titan_cfg.model_spec builds from. A flow whose torchtitan config came from Prefect's cache has not imported
#: torchtitan, and its validate spent 2.5 s here on the flow's main thread (py-spy, native cpu, 3 steps).
ROUND_TRIP_MODULES = ("torchtitan.models.common", "torchtitan.models.qwen3", "torchtitan.models.qwen3.model")


def modules_for(round_trip: bool) -> tuple[str, ...]:
    """What ``validate`` imports: :data:`MODULES`, and :data:`ROUND_TRIP_MODULES` when the scenario's export is
    checked HF -> torchtitan -> HF (``titan_cfg.scenarios.Scenario.round_trip``)."""
    return MODULES + ROUND_TRIP_MODULES if round_trip else MODULES


def _import_all(modules: tuple[str, ...], failed: list[str]) -> None:
    if any(name.startswith("torchtitan") for name in modules):
        from titan_cfg.compat.cpu import make_importable_without_triton  # lazy: torch

        make_importable_without_triton()  # import-only, as the round trip applies it (titan_cfg.compat.cpu)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the check that needs it raises it again, in its own task
            failed.append(f"{name}: {type(err).__name__}: {err}")


def import_ahead(modules: tuple[str, ...] = MODULES) -> tuple[threading.Thread, list[str]]:
    """Start importing ``modules`` on a daemon thread; returns (the thread, the list it appends a failed import to:
    ``"<module>: <error>"``). A failure is left to the check that imports the module for real."""
    failed: list[str] = []
    thread = threading.Thread(target=_import_all, args=(modules, failed), name="titanflow-import-ahead", daemon=True)
    thread.start()
    return thread, failed
