"""Every private name of torch and torchtitan that titanflow uses, in one place.

Written against torch 2.13.0 and torchtitan 0.3.0 (profiles/cpu/constraints.txt). Each name is private upstream, so
any release may move or drop it; the trn2 profile's torchtitan (the Neuron fork, 0.2.2+neuron.1) has not been seen to
hold them. ``titanflow doctor`` resolves each (:func:`missing`), so a machine whose torch or torchtitan lacks one is
told before a launch instead of by an ImportError inside a rank; tests/unit/titan_cfg/test_upstream.py keeps every
other module of the project off private torch and torchtitan names.

| name | used for | why no public name does |
|---|---|---|
| ``torchtitan.models.qwen3._build_qwen3_layers``, ``_build_qwen3_moe_layers`` | the decoder layers of a model spec built from a checkpoint's config.json (titan_cfg.model_spec) | the only place that encodes torchtitan's Qwen3 layer layout and init; its flavors are fixed sizes |
| ``torchtitan.models.qwen3._qwen3_norm``, ``_EMBEDDING_INIT``, ``_EMBEDDING_SKIP_INIT``, ``_LINEAR_INIT`` | the norm, embedding and output layer of that spec, initialised as torchtitan's own | the same |
| ``torch.distributed.distributed_c10d._set_pg_timeout`` | process-group timeouts on CPU (titan_cfg.compat.cpu) | torch 2.13 exports no ``set_timeout`` |
| ``torch._utils._get_available_device_type`` | whether torchtitan would pick "cuda" on a CPU-only torch (titan_cfg.compat.cpu) | torch has no public query of it |
"""

from __future__ import annotations

import importlib
from typing import Any

#: The versions these names were read in.
WRITTEN_AGAINST = {"torch": "2.13.0", "torchtitan": "0.3.0"}

#: (module, name) of every private upstream name used, as in the module docstring's table.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("torchtitan.models.qwen3", "_build_qwen3_layers"),
    ("torchtitan.models.qwen3", "_build_qwen3_moe_layers"),
    ("torchtitan.models.qwen3", "_qwen3_norm"),
    ("torchtitan.models.qwen3", "_EMBEDDING_INIT"),
    ("torchtitan.models.qwen3", "_EMBEDDING_SKIP_INIT"),
    ("torchtitan.models.qwen3", "_LINEAR_INIT"),
    ("torch.distributed.distributed_c10d", "_set_pg_timeout"),
    ("torch._utils", "_get_available_device_type"),
)


def private(module: str, name: str) -> Any:
    """``module.name``, one of :data:`PRIVATE_NAMES`.

    Raises:
        KeyError: the pair is not in :data:`PRIVATE_NAMES` (add it there, with its row in the table).
        ImportError: this torch or torchtitan lacks it (the message names the versions it was written against).
    """
    if (module, name) not in PRIVATE_NAMES:
        raise KeyError(f"{module}.{name} is not among titan_cfg.upstream.PRIVATE_NAMES; add it there with its reason")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        written = ", ".join(f"{package} {version}" for package, version in WRITTEN_AGAINST.items())
        raise ImportError(f"{module}.{name}, a private name titanflow uses, is not in this install ({err}); it was "
                          f"written against {written}: see titan_cfg/upstream.py") from err


def missing() -> dict[str, str]:
    """Every name of :data:`PRIVATE_NAMES` this install lacks: ``{"module.name": why}`` (the import's own error)."""
    lacking = {}
    for module, name in PRIVATE_NAMES:
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:
            lacking[f"{module}.{name}"] = str(err)
    return lacking


def qwen3_layers(**config) -> list:
    """torchtitan's dense Qwen3 decoder layer configs (``_build_qwen3_layers``)."""
    return private("torchtitan.models.qwen3", "_build_qwen3_layers")(**config)


def qwen3_moe_layers(**config) -> list:
    """torchtitan's Qwen3 MoE decoder layer configs (``_build_qwen3_moe_layers``)."""
    return private("torchtitan.models.qwen3", "_build_qwen3_moe_layers")(**config)


def qwen3_norm(dim: int):
    """torchtitan's Qwen3 RMSNorm config over ``dim`` (``_qwen3_norm``)."""
    return private("torchtitan.models.qwen3", "_qwen3_norm")(dim)


def qwen3_inits() -> tuple[Any, Any, Any]:
    """torchtitan's Qwen3 parameter inits: (embedding, embedding left to the tied head, output layer)."""
    return tuple(private("torchtitan.models.qwen3", name)
                 for name in ("_EMBEDDING_INIT", "_EMBEDDING_SKIP_INIT", "_LINEAR_INIT"))


def set_pg_timeout(timeout, group) -> None:
    """Set the timeout of process group ``group`` (None: the default one): ``_set_pg_timeout``."""
    private("torch.distributed.distributed_c10d", "_set_pg_timeout")(timeout, group)


def available_device_type() -> str | None:
    """The accelerator type torch finds, None on a CPU-only build (``torch._utils._get_available_device_type``)."""
    return private("torch._utils", "_get_available_device_type")()
