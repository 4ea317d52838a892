"""Compile-cache folders keyed by everything that changes compiled artifacts.

Neuron compiler flags change the artifacts, and cache reuse across different
flags has been reported wrong upstream, so the key covers the target, the
compiler version, the flags, LNC and the shapes a graph is specialised on. On
cpu-hosted targets it also covers the CPU's instruction set: inductor generates
vector code for it (training compiles torchtitan's block-mask builder even with
compile off), and code for AVX-512 does not run on a machine without it. The
folder is shared by runs with the same key (warm-up fills it, training reads it).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

from titan_cfg.cpu_isa import cpu_capability, cpu_model_and_flags
from titan_cfg.job import Job
from titan_cfg.targets import Target

#: Which environment variable points each compile backend at its cache.
CACHE_ENV = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "neuron": "NEURON_COMPILE_CACHE_URL"}

#: Environment variables whose value changes what the compiler produces.
FLAG_ENV = ("NEURON_CC_FLAGS", "NEURON_LOGICAL_NC_CONFIG", "TORCHINDUCTOR_MAX_AUTOTUNE")


def compiler_version(backend: str) -> str:
    """Version string of the compiler behind ``backend`` ("absent" when not installed)."""
    package = {"inductor": "torch", "neuron": "neuronx-cc"}.get(backend, backend)
    try:
        return f"{package}=={importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package}==absent"


def cache_key(job: Job, target: Target, model_shape: dict) -> str:
    """16-hex-digit sha256 of (scenario, target, world size, compiler version, flags, LNC, shapes, kernels,
    and on cpu-hosted targets the CPU's instruction set)."""
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
        material["cpu"] = {"capability": cpu_capability(), "isa_flags": cpu_model_and_flags()[1]}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def cache_env(job: Job, target: Target, model_shape: dict, cache_root: Path) -> dict[str, str]:
    """``{<backend cache variable>: <cache_root>/compile/<target>-<key>}`` for the job's backend."""
    backend = job.compile_backend or "inductor"
    folder = cache_root / "compile" / f"{target.name}-{cache_key(job, target, model_shape)}"
    return {CACHE_ENV.get(backend, "TORCHINDUCTOR_CACHE_DIR"): str(folder)}
