"""The libraries the export's checks import (torch, transformers' Qwen3 models, safetensors), imported ahead on a thread of their own while training runs, so that ``validate``
starts checking instead of importing (8-9 s of imports in the flow process, which otherwise sits idle through
training).

Why a thread and not a process: the imports are for the flow process itself. Python's import lock makes it safe:
a task that imports a module the thread is still importing waits for it, then finds it imported. On a machine
whose cores training leaves idle this is time saved; where training takes every core (2 cores, 2 ranks) the
imports compete with it (benchmarks/overhead.py measures both).
"""

from __future__ import annotations

import importlib
import threading

#: What the checks import (titanflow.export.structure, load, parity), heaviest first. torchtitan (the round trip)
#: is left out: it is imported only behind its compat layer (titan_cfg.compat.cpu), which the round trip applies.
MODULES = ("torch", "transformers", "transformers.models.qwen3.modeling_qwen3",
           "transformers.models.qwen3_moe.modeling_qwen3_moe", "safetensors.torch")


def _import_all(modules: tuple[str, ...], failed: list[str]) -> None:
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
