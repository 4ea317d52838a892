"""Compile-cache folders keyed by everything that changes compiled artifacts.

Neuron compiler flags change the artifacts, and cache reuse across different
flags has been reported wrong upstream, so the key covers the target, the
compiler version, the flags, LNC and the shapes a graph is specialised on. On
cpu-hosted targets it also covers the CPU's instruction set: inductor generates
vector code for it (with flex attention, training compiles torchtitan's block-mask
builder even with compile off), and code for AVX-512 does not run on a machine without it. The
folder is shared by runs with the same key (warm-up fills it, training reads it).

Each backend's compiler is pointed into the folder by its own variables (:data:`CACHE_ENV`):
inductor by ``TORCHINDUCTOR_CACHE_DIR``; TorchNeuron (torch-neuronx 2.14, the ``neuron`` device) by
``TORCH_NEURONX_NEFF_CACHE_DIR`` (compiled NEFFs, the persistent cache), ``TORCH_NEURONX_HLO_CACHE_DIR``
(HLO) and ``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR`` (the node-local copy), each in a subfolder (Neuron
docs, "TorchNeuron environment variables"; ``NEURON_COMPILE_CACHE_URL`` is the XLA-era variable, which
TorchNeuron does not read). The folder is warm for its key when the compiler wrote entries there
(:func:`cache_entries`), which also shows that the variables were read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

from titan_cfg.cpu_isa import cpu_capability, cpu_model_and_flags
from titan_cfg.job import Job
from titan_cfg.targets import Target

#: Per compile backend, the environment variables that point its compiler at a cache, each with its
#: subfolder of the keyed folder ("": the folder itself). The first is where the compiled artifacts go.
CACHE_ENV: dict[str, dict[str, str]] = {
    "inductor": {"TORCHINDUCTOR_CACHE_DIR": ""},
    "neuron": {"TORCH_NEURONX_NEFF_CACHE_DIR": "neff", "TORCH_NEURONX_HLO_CACHE_DIR": "hlo",
               "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": "neff-local"},
}

#: Distributions whose versions decide each backend's compiled artifacts: for neuron the framework
#: (torch-neuronx: lowering, HLO) and the compiler (neuronx-cc: NEFF).
COMPILER_PACKAGES = {"inductor": ("torch",), "neuron": ("torch-neuronx", "neuronx-cc")}

#: Environment variables whose value changes what the compiler produces.
FLAG_ENV = ("NEURON_CC_FLAGS", "NEURON_LOGICAL_NC_CONFIG", "TORCHINDUCTOR_MAX_AUTOTUNE")


def compiler_version(backend: str) -> str:
    """``pkg==version`` of each distribution in :data:`COMPILER_PACKAGES` for ``backend``, joined by
    ``;`` ("absent" for one not installed), e.g. ``torch-neuronx==2.14.3.0;neuronx-cc==2.33.0``."""
    versions = []
    for package in COMPILER_PACKAGES.get(backend, (backend,)):
        try:
            versions.append(f"{package}=={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package}==absent")
    return ";".join(versions)


def cache_key(job: Job, target: Target, model_shape: dict, cache_root: Path | None = None) -> str:
    """16-hex-digit sha256 of (scenario, target, world size, compiler version, flags, LNC, shapes, kernels,
    and on cpu-hosted targets the CPU's instruction set: :func:`titan_cfg.cpu_isa.cpu_capability`, kept under
    ``cache_root`` when given)."""
    backend = job.compile_backend or "inductor"
    material = {
        "scenario": job.scenario,  # native and transformers-backend graphs differ
        "target": target.name,
        "world_size": job.global_batch_size // job.local_batch_size,
        "compiler": compiler_version(backend),
        "flags": {k: target.env.get(k) for k in FLAG_ENV},
        "lnc": target.lnc,
        "shapes": {"local_batch_size": job.local_batch_size, "seq_len": job.seq_len, "model": model_shape},
        "kernels": job.kernels,
    }
    if target.device in ("cpu", "cuda"):  # inductor generates host code for this CPU
        material["cpu"] = {"capability": cpu_capability(cache_root), "isa_flags": cpu_model_and_flags()[1]}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def cache_env(job: Job, target: Target, model_shape: dict, cache_root: Path) -> dict[str, str]:
    """Every cache variable of the job's backend (:data:`CACHE_ENV`) pointed into the keyed folder
    ``<cache_root>/compile/<target>-<key>``, e.g. ``TORCH_NEURONX_NEFF_CACHE_DIR=<folder>/neff``."""
    backend = job.compile_backend or "inductor"
    folder = cache_root / "compile" / f"{target.name}-{cache_key(job, target, model_shape, cache_root)}"
    return {variable: str(folder / sub) if sub else str(folder)
            for variable, sub in CACHE_ENV.get(backend, CACHE_ENV["inductor"]).items()}


def cache_folder(env: dict[str, str]) -> tuple[Path, str] | None:
    """(keyed folder, backend) that ``env`` (a rendered job's environment) points its compiler at;
    None when it sets no cache variable of :data:`CACHE_ENV`."""
    for backend, variables in CACHE_ENV.items():
        for variable, sub in variables.items():
            if variable in env:
                path = Path(env[variable])
                return (path.parent if sub else path), backend
    return None


def cache_entries(folder: Path, backend: str, ignore: tuple[str, ...] = ()) -> int:
    """How many files the ``backend``'s compiler wrote where it keeps compiled artifacts: the keyed
    ``folder`` itself for inductor, its ``neff`` subfolder for neuron (the first of
    :data:`CACHE_ENV`'s variables); files named in ``ignore`` (a marker) do not count."""
    sub = next(iter(CACHE_ENV[backend].values()))
    where = folder / sub if sub else folder
    if not where.is_dir():
        return 0
    return sum(1 for path in where.rglob("*") if path.is_file() and path.name not in ignore)
