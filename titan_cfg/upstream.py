"""Every name titanflow's rank code and renders take from torchtitan and the Neuron packages, and the private torch
names, in one list (:data:`NAMES`).

Written against torch 2.13.0 and torchtitan 0.3.0 (profiles/cpu/constraints.txt); the trn2 profile's torchtitan is the
Neuron fork (0.2.2+neuron.1, release-2.33), whose source has not been readable, so none of these names is known to be
there until ``titanflow doctor --target trn2`` resolves them on the node (:func:`missing`, in a Python of its own after
the target's compatibility layers, as a rank resolves them). A torchtitan that lacks one is told before a launch, one
line per missing name with the module it was looked for in, instead of by an ImportError inside a rank.

tests/unit/titan_cfg/test_upstream.py parses every module of titan_cfg/, titanflow/, tasks/ and flows/ and fails on
a name taken from torchtitan, torch_neuronx, nki or nkilib that :data:`TORCHTITAN` or :data:`NEURON` lacks (and on an
entry no code takes any more), so a new import cannot skip the check. What counts as taking a name:
``from M import N`` (M, N); ``import M`` (M, the module itself) and each ``M.attr`` read or assigned after it (M, attr);
``N.attr`` of a name imported from M (M, ``N.attr``: a class's nested ``Config``, a method patched, a submodule's
function). Imports under ``if TYPE_CHECKING:`` count: they name the upstream types the signatures promise, and a
torchtitan without them has moved the API that the code reaches through them.

Private names (a part that starts with ``_``) are upstream's to move or drop in any release; each has its reason here.
Public ones need only their module and name in the list.

| name | used for | why no public name does |
|---|---|---|
| ``torchtitan.models.qwen3._build_qwen3_layers``, ``_build_qwen3_moe_layers`` | the decoder layers of a model spec built from a checkpoint's config.json (titan_cfg.model_spec) | the only place that encodes torchtitan's Qwen3 layer layout and init; its flavors are fixed sizes |
| ``torchtitan.models.qwen3._qwen3_norm``, ``_EMBEDDING_INIT``, ``_EMBEDDING_SKIP_INIT``, ``_LINEAR_INIT`` | the norm, embedding and output layer of that spec, initialised as torchtitan's own | the same |
| ``torch.distributed.distributed_c10d._set_pg_timeout`` | process-group timeouts on CPU (titan_cfg.compat.cpu) | torch 2.13 exports no ``set_timeout`` |
| ``torch._utils._get_available_device_type`` | whether torchtitan would pick "cuda" on a CPU-only torch (titan_cfg.compat.cpu) | torch has no public query of it |
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass
from typing import Any

#: The versions these names were read in (the Neuron ones: see :data:`NEURON`).
WRITTEN_AGAINST = {"torch": "2.13.0", "torchtitan": "0.3.0"}

#: Module -> the names titanflow takes from it, on every target. ``"Trainer.train"``: an attribute of a name of the
#: module (a nested config class, a method a patch replaces, a function of a submodule imported by name); ``()``: the
#: module is imported whole, for what importing it does.
TORCHTITAN: dict[str, tuple[str, ...]] = {
    "torchtitan.components.data": ("ConcatThenSplitPackingConfig", "GrainDataLoader", "GrainDataLoader.Config",
                                   "HuggingFaceRandomAccessSource", "HuggingFaceRandomAccessSource.Config",
                                   "SingleDatasetConfig", "TextCollator", "TextCollator.Config", "TextCollator.__call__",
                                   "TextSequence"),
    "torchtitan.components.optimizer": ("default_adamw",),
    "torchtitan.config": ("ActivationCheckpointConfig",),  # the form before FullAC / SelectiveAC (titan_cfg.forms)
    "torchtitan.config.manager": ("ConfigManager", "ConfigManager.parse_args"),  # its argv default (titan_cfg.forms)
    "torchtitan.distributed.activation_checkpoint": ("FullAC", "FullAC.Config", "SelectiveAC", "SelectiveAC.Config"),
    "torchtitan.distributed.fsdp": ("disable_fsdp_gradient_division",),  # patched on cpu (titan_cfg.compat.cpu)
    "torchtitan.distributed.utils": ("set_pg_timeouts",),  # patched on cpu
    "torchtitan.experiments.transformers_modeling_backend": (
        "model", "model.create_attention_mask", "model.flex_attention_forward"),  # replaced by attention=sdpa
    "torchtitan.experiments.transformers_modeling_backend.config_registry": ("transformers_modeling_backend_full",),
    "torchtitan.experiments.transformers_modeling_backend.model": (
        "HFTransformerModel", "HFTransformerModel.init_states"),  # patched by the hf_backend layer
    "torchtitan.hf_datasets.text_datasets": ("HuggingFaceTextDataLoader", "HuggingFaceTextDataLoader.Config",
                                             "TextProcessor", "TextProcessor.Config", "TextProcessor.__call__"),  # or Grain's
    "torchtitan.models.common": ("CosSinRoPE", "CosSinRoPE.Config", "Embedding", "Embedding.Config", "Linear",
                                 "Linear.Config", "decoder", "decoder.create_attention_mask"),
    "torchtitan.models.common.attention": ("FlexAttention", "FlexAttention.Config", "ScaledDotProductAttention",
                                           "ScaledDotProductAttention.Config"),
    "torchtitan.models.common.moe": ("TokenChoiceTopKRouter",),
    "torchtitan.models.common.rope": ("CosSinRoPE", "CosSinRoPE.Config", "CosSinRoPE.apply_rotary_emb"),
    "torchtitan.models.qwen3": ("model_registry", "_build_qwen3_layers", "_build_qwen3_moe_layers", "_qwen3_norm",
                                "_EMBEDDING_INIT", "_EMBEDDING_SKIP_INIT", "_LINEAR_INIT"),
    "torchtitan.models.qwen3.config_registry": ("qwen3_32b", "qwen3_30b_a3b"),
    "torchtitan.models.qwen3.model": ("Qwen3Model", "Qwen3Model.Config"),
    "torchtitan.tools.utils": ("device_module", "device_type"),  # set on cpu
    "torchtitan.train": ("main",),
    "torchtitan.trainer": ("Trainer", "Trainer.Config", "Trainer.forward_backward_step", "Trainer.train", "logger",
                           "time"),  # the probe and the first-batch record wrap Trainer's methods
}

#: Dotted module or name -> the scenarios that take it (and what under it); the rest are taken by every scenario.
ONLY_FOR: dict[str, tuple[str, ...]] = {
    "torchtitan.experiments.transformers_modeling_backend": ("hf_backend",),
    "torchtitan.models.qwen3._": ("native", "moe"),  # the private builders of titan_cfg.model_spec
    "torchtitan.models.qwen3.model": ("native", "moe"),
    "torchtitan.models.qwen3.model_registry": ("native", "moe"),
    "torchtitan.models.common": ("native", "moe"),
    "torchtitan.models.common.moe": ("moe",),
    "torchtitan.models.qwen3.config_registry.qwen3_32b": ("native",),
    "torchtitan.models.qwen3.config_registry.qwen3_30b_a3b": ("moe",),
}

#: Names of a form of an adapted change of the torchtitan window (titan_cfg.window, titan_cfg.forms): each install
#: has one form or the other, so none of them is needed by itself; the window's check covers them.
FORMS: frozenset[str] = frozenset({
    "torchtitan.config.ActivationCheckpointConfig",
    *(f"torchtitan.distributed.activation_checkpoint.{n}" for n in ("FullAC", "FullAC.Config", "SelectiveAC",
                                                                     "SelectiveAC.Config")),
    # the text loader before 2026-08-19 (#4088), Grain's data path from it (titan_cfg.forms.text_loader)
    *(f"torchtitan.hf_datasets.text_datasets.{n}" for n in ("HuggingFaceTextDataLoader",
                                                             "HuggingFaceTextDataLoader.Config", "TextProcessor",
                                                             "TextProcessor.Config", "TextProcessor.__call__")),
    *(f"torchtitan.components.data.{n}" for n in ("ConcatThenSplitPackingConfig", "GrainDataLoader",
                                                   "GrainDataLoader.Config", "HuggingFaceRandomAccessSource",
                                                   "HuggingFaceRandomAccessSource.Config", "SingleDatasetConfig",
                                                   "TextCollator", "TextCollator.Config", "TextCollator.__call__",
                                                   "TextSequence")),
})

#: Module -> the names titanflow takes from it on Neuron nodes only (targets of device ``neuron``: trn2, trn2-cluster;
#: installed by the trn2 profile, absent from cpu and cuda machines, whose checks skip them). Read in torch-neuronx's
#: source (``torch_neuronx/nki_hop.py``: ``nki_op``, ``wrap_nki``; 2.14 line) and nki-library's
#: (``src/nkilib_src/nkilib/core/embeddings/rope_hf.py``); titanflow takes nothing from ``nki`` itself (nkilib's
#: kernels do; doctor's ``kernel rope=neuron`` check imports it).
NEURON: dict[str, tuple[str, ...]] = {
    "nkilib.core.embeddings.rope_hf": ("rope_hf",),
    "torch_neuronx": ("nki_op", "wrap_nki"),
}

#: Module -> the private torch names titanflow takes (the module docstring's table), on every target; torch's public
#: names are not listed: the profiles pin torch itself.
TORCH: dict[str, tuple[str, ...]] = {
    "torch._utils": ("_get_available_device_type",),
    "torch.distributed.distributed_c10d": ("_set_pg_timeout",),
}


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


@dataclass(frozen=True)
class Name:
    """One name titanflow takes: ``module`` and ``name`` in it (dotted for an attribute of one; None: the module
    itself), and the ``device`` of the targets that need it (None: every target)."""

    module: str
    name: str | None
    device: str | None = None

    @property
    def dotted(self) -> str:
        """``module.name`` (the module alone for a whole-module import)."""
        return f"{self.module}.{self.name}" if self.name else self.module

    @property
    def private(self) -> bool:
        """Whether any part of the module or the name is private upstream (starts with ``_``)."""
        return any(map(_private, self.dotted.split(".")))


def _names(table: dict[str, tuple[str, ...]], device: str | None = None) -> tuple[Name, ...]:
    return tuple(Name(module, name, device) for module, names in table.items() for name in (names or (None,)))


#: Every name of :data:`TORCHTITAN`, :data:`NEURON` (device ``neuron``) and :data:`TORCH`.
NAMES: tuple[Name, ...] = _names(TORCHTITAN) + _names(NEURON, "neuron") + _names(TORCH)

#: (module, name) of every private name (the module docstring's table): the only ones :func:`private` hands out.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = tuple((n.module, n.name) for n in NAMES if n.private)


def _scenarios(entry: Name) -> tuple[str, ...] | None:
    """The scenarios that take ``entry`` (:data:`ONLY_FOR`, the longest prefix that matches), None: every one."""
    matches = [prefix for prefix in ONLY_FOR if entry.dotted == prefix or entry.dotted.startswith(
        prefix if prefix.endswith("_") else f"{prefix}.")]
    return ONLY_FOR[max(matches, key=len)] if matches else None


def names_for(device: str, scenario: str | None = None) -> tuple[Name, ...]:
    """The names a target of ``device`` (``cpu``, ``cuda``, ``neuron``: titan_cfg.targets.Target.device) needs, for
    ``scenario`` alone (:data:`ONLY_FOR`) or for every scenario (None); the names of an adapted change's forms
    (:data:`FORMS`) are left to the window's check."""
    return tuple(n for n in NAMES if n.device in (None, device) and n.dotted not in FORMS
                 and (scenario is None or scenario in (_scenarios(n) or (scenario,))))


class Missing(LookupError):
    """A name that does not resolve: ``what`` (the dotted module or name that failed first) and ``why``."""

    def __init__(self, what: str, why: str):
        super().__init__(f"{what}: {why}")
        self.what, self.why = what, why


def _import(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and (module == err.name or module.startswith(f"{err.name}.")):
            raise Missing(err.name, "no module") from err
        raise Missing(module, f"does not import ({type(err).__name__}: {err})") from err
    except Exception as err:  # noqa: BLE001 - whatever the module raises while it imports is the answer
        raise Missing(module, f"does not import ({type(err).__name__}: {err})") from err


def resolve(module: str, name: str | None) -> Any:
    """``module``'s ``name`` (dotted: attribute after attribute; a package's submodule imported as ``from package
    import name`` would), or the module itself for None.

    Raises:
        Missing: ``<module>: no module`` (or the missing package above it), ``<module>: does not import (<error>)``,
            or ``<module.name>: module <module> has no name <name>`` (``<object> has no name <attr>`` further in).
    """
    found, where = _import(module), module
    for part in (name.split(".") if name else ()):
        if hasattr(found, part):
            found = getattr(found, part)
        elif hasattr(found, "__path__"):  # a package: the submodule, as `from package import part` finds it
            try:
                found = importlib.import_module(f"{where}.{part}")
            except ModuleNotFoundError as err:
                if err.name != f"{where}.{part}":
                    raise Missing(f"{where}.{part}", f"does not import ({type(err).__name__}: {err})") from err
                raise Missing(f"{where}.{part}", f"module {where} has no name {part}") from err
        else:
            kind = "module " if isinstance(found, types.ModuleType) else ""
            raise Missing(f"{where}.{part}", f"{kind}{where} has no name {part}")
        where = f"{where}.{part}"
    return found


def private(module: str, name: str) -> Any:
    """``module.name``, one of :data:`PRIVATE_NAMES`.

    Raises:
        KeyError: the pair is not in :data:`PRIVATE_NAMES` (add it to its table, with its row in the docstring's).
        ImportError: this torch or torchtitan lacks it (the message names the versions it was written against).
    """
    if (module, name) not in PRIVATE_NAMES:
        raise KeyError(f"{module}.{name} is not among titan_cfg.upstream.PRIVATE_NAMES; add it there with its reason")
    try:
        return resolve(module, name)
    except Missing as err:
        written = ", ".join(f"{package} {version}" for package, version in WRITTEN_AGAINST.items())
        raise ImportError(f"{module}.{name}, a private name titanflow uses, is not in this install ({err}); it was "
                          f"written against {written}: see titan_cfg/upstream.py") from err


def missing(device: str, names: tuple[Name, ...] | None = None) -> dict[str, str]:
    """Every name a target of ``device`` needs (:func:`names_for`; or ``names``) that this install lacks:
    ``{what failed first: why}`` (:func:`resolve`'s words), one entry per missing module however many names it holds.
    """
    lacking = {}
    for entry in names_for(device) if names is None else names:
        try:
            resolve(entry.module, entry.name)
        except Missing as err:
            lacking.setdefault(err.what, err.why)
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
    return (private("torchtitan.models.qwen3", "_EMBEDDING_INIT"),
            private("torchtitan.models.qwen3", "_EMBEDDING_SKIP_INIT"),
            private("torchtitan.models.qwen3", "_LINEAR_INIT"))


def set_pg_timeout(timeout, group) -> None:
    """Set the timeout of process group ``group`` (None: the default one): ``_set_pg_timeout``."""
    private("torch.distributed.distributed_c10d", "_set_pg_timeout")(timeout, group)


def available_device_type() -> str | None:
    """The accelerator type torch finds, None on a CPU-only build (``torch._utils._get_available_device_type``)."""
    return private("torch._utils", "_get_available_device_type")()
