"""Kernel override registry: named ops, their implementations per device type, chosen per run.

A faster kernel per device is substituted without forking torchtitan: every op has
an *installer* that edits the torchtitan model config before the model is built (so
before parallelisation, compile and checkpoint load), and each implementation
declares the device types it runs on (a target's ``device``: cpu, cuda, neuron) and the tensor layout it expects. The registry's
layout adapter (:mod:`titan_cfg.kernels.layout`) permutes torchtitan's tensors into
that layout and the results back. The table is :data:`OPS` below; the README's
"Kernel overrides" table shows it to users (tests/unit/titan_cfg/test_kernels.py keeps the two equal).

Layout letters: B batch, L sequence, N heads, H head_dim. The choice is resolved
from the target's defaults, the scenario's per-target choices and the user's
overrides (:func:`resolve`), checked before anything runs, and recorded in
``job.json`` and ``summary.json``. This module imports no torch, so parameter
validation stays cheap; the implementations load on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass


class KernelChoiceError(ValueError):
    """An unknown op or implementation, or one that does not run on the target's device; the message lists the known
    ones."""


@dataclass(frozen=True)
class Implementation:
    """One implementation of an op.

    ``runs_on``: the device types (titan_cfg.targets.Target.device) of the targets it runs on.
    ``entry`` is ``"module:attribute"``, imported on first use (None: the upstream
    torchtitan module is kept as is). ``requires`` names the modules that must import
    for it to run, the kernel's own module among them (checked by :meth:`unavailable`,
    which imports them: a package that is installed but whose kernel module does not
    import is unavailable too). ``seq_tile``: the
    sequence length must be a multiple of ``seq_tile`` x LNC (checked up front by
    :meth:`check_shape`). ``device``: a torch device type that must be present ("cuda").
    ``decoder_only``: it replaces a module of torchtitan's own decoder, so a scenario whose model is not one (the
    transformers backend: ``Scenario.torchtitan_decoder``) cannot take it (checked with the run's parameters).
    """

    op: str
    name: str
    runs_on: tuple[str, ...]
    layout: str
    entry: str | None
    description: str
    requires: tuple[str, ...] = ()
    seq_tile: int | None = None
    device: str | None = None
    decoder_only: bool = False

    def check_shape(self, seq_len: int, lnc: int | None) -> None:
        """Raises KernelChoiceError when ``seq_len`` breaks the implementation's tiling at ``lnc``."""
        multiple = (self.seq_tile or 1) * (lnc or 1)
        if seq_len % multiple:
            raise KernelChoiceError(f"seq_len: {seq_len} is not a multiple of {multiple} ({self.seq_tile} x LNC="
                                    f"{lnc or 1}), which {self.op}={self.name} needs; fix: pass a multiple of {multiple} "
                                    f"or another {self.op} implementation")

    def unavailable(self) -> str | None:
        """Why this implementation cannot run in this Python (None when it can): the first module of
        ``requires`` that does not import (``<package> is not installed`` when its package is absent,
        ``<module> does not import: <error>`` otherwise), or a missing device."""
        for module in self.requires:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as err:
                if err.name == module.split(".")[0]:
                    return f"{err.name} is not installed"
                return f"{module} does not import: {err}"
            except ImportError as err:
                return f"{module} does not import: {err}"
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "no CUDA device"
        return None

    def load(self) -> Callable:
        """The implementation's kernel function.

        Raises:
            RuntimeError: it has no kernel (upstream's module is used) or its runtime is missing.
        """
        if self.entry is None:
            raise RuntimeError(f"{self.op}={self.name} is torchtitan's own module; there is no kernel to load")
        missing = self.unavailable()
        if missing:
            raise RuntimeError(f"{self.op}={self.name} cannot run here: {missing}")
        module, attribute = self.entry.split(":")
        return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Op:
    """An overridable op: its installer (``"module:function"``, called as ``install(trainer_config, name)``)
    and its implementations by name."""

    name: str
    installer: str
    implementations: dict[str, Implementation]

    def install(self, trainer_config, implementation: str) -> None:
        """Apply ``implementation`` to ``trainer_config``'s model (see the installer's docstring)."""
        module, function = self.installer.split(":")
        getattr(importlib.import_module(module), function)(trainer_config, implementation)


def _op(name: str, installer: str, *implementations: Implementation) -> Op:
    return Op(name, installer, {impl.name: impl for impl in implementations})


#: Every device type a target has (titan_cfg.targets.Target.device).
ALL_DEVICES = ("cpu", "cuda", "neuron")

OPS: dict[str, Op] = {
    "rope": _op(
        "rope", "titan_cfg.kernels.rope:install",
        Implementation("rope", "reference", ALL_DEVICES, "BLNH", "titan_cfg.kernels.rope:reference_rope",
                       "torchtitan's CosSinRoPE (fp32 rotate-half), the module left as upstream builds it"),
        Implementation("rope", "cpu", ("cpu", "cuda"), "BNLH", "titan_cfg.kernels.rope_cpu:rope_hf",
                       "torch.library custom op titanflow::rope_hf in the HF layout, own backward, fake impl",
                       decoder_only=True),
        Implementation("rope", "neuron", ("neuron",), "BNLH", "titan_cfg.kernels.rope_neuron:rope_hf",
                       "nkilib rope_hf (forward and backward kernels) registered with torch-neuronx's nki_op",
                       # nkilib.core.embeddings.rope_hf: seq_len a multiple of 128 x LNC shards
                       requires=("torch_neuronx", "nki", "nkilib.core.embeddings.rope_hf"), seq_tile=128,
                       decoder_only=True),
        Implementation("rope", "cuda", ("cuda",), "BNLH", "titan_cfg.kernels.rope_cuda:rope_hf",
                       "Triton kernel behind the custom op titanflow::rope_hf_cuda, own backward (-sin)",
                       requires=("triton",), device="cuda", decoder_only=True),
    ),
    "attention": _op(
        "attention", "titan_cfg.kernels.attention:install",
        Implementation("attention", "flex", ("cuda",), "BLNH", None,
                       "torchtitan's FlexAttention (no backward on CPU; not the Neuron fork's backend)"),
        Implementation("attention", "sdpa", ALL_DEVICES, "BNLH", "titan_cfg.kernels.attention:masked_sdpa",
                       "F.scaled_dot_product_attention on torchtitan's block-causal document mask, made dense"),
        Implementation("attention", "causal", ALL_DEVICES, "BNLH", "titan_cfg.kernels.attention:causal_sdpa",
                       "F.scaled_dot_product_attention(is_causal=True) over the packed row, no mask, RoPE positions "
                       "0..L-1 (the Neuron fork's attention; torch-neuronx's fused kernel)"),
    ),
}


def known() -> str:
    """``rope: reference, cpu, neuron, cuda; attention: flex, sdpa, causal`` (for error messages)."""
    return "; ".join(f"{name}: {', '.join(op.implementations)}" for name, op in OPS.items())


def implementation(op: str, name: str) -> Implementation:
    """The registered implementation ``name`` of ``op``.

    Raises:
        KernelChoiceError: unknown op or implementation (lists the known ones).
    """
    if op not in OPS:
        raise KernelChoiceError(f"kernels: unknown op {op!r}; fix: pass one of the known ops and implementations: {known()}")
    if name not in OPS[op].implementations:
        raise KernelChoiceError(f"kernels: unknown {op} implementation {name!r}; fix: pass one of "
                                f"{', '.join(OPS[op].implementations)}")
    return OPS[op].implementations[name]


def loaded(op: str, name: str) -> tuple[Callable, str]:
    """(kernel function, layout) of the registered implementation ``name`` of ``op``: what a module that runs it
    resolves once when it is built (torch.compile cannot trace the import behind :meth:`Implementation.load`).

    Raises:
        KernelChoiceError: unknown op or implementation; RuntimeError: as :meth:`Implementation.load`.
    """
    impl = implementation(op, name)
    return impl.load(), impl.layout


def resolve(device: str, *layers: Mapping[str, str] | None) -> dict[str, str]:
    """The implementation of every op for a target of ``device`` type (titan_cfg.targets.Target.device): later
    ``layers`` (e.g. target defaults, then the scenario's choice, then the user's) override earlier ones; every op must
    end up chosen.

    Raises:
        KernelChoiceError: an unknown op or implementation, one that does not run on ``device``, or an op
            left without a choice.
    """
    chosen: dict[str, str] = {}
    for layer in layers:
        chosen.update(layer or {})
    for op, name in chosen.items():
        impl = implementation(op, name)
        if device not in impl.runs_on:
            fits = [n for n, i in OPS[op].implementations.items() if device in i.runs_on]
            raise KernelChoiceError(f"kernels: {op}={name} does not run on {device} targets "
                                    f"(it runs on {', '.join(impl.runs_on)}); fix: on {device} pass one of {', '.join(fits)}")
    unset = [op for op in OPS if op not in chosen]
    if unset:
        raise KernelChoiceError(f"kernels: no implementation chosen for {', '.join(unset)}; fix: choose one of {known()}")
    return {op: chosen[op] for op in OPS}


def apply(trainer_config, choices: Mapping[str, str]) -> None:
    """Install every chosen implementation into ``trainer_config`` (a torchtitan ``Trainer.Config``)."""
    for op, name in choices.items():
        implementation(op, name)
        OPS[op].install(trainer_config, name)
