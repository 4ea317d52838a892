"""This machine's CPU as the numerics see it: its model, the instruction-set flags that decide which
kernels MKL / oneDNN / ATen run and inductor generates, and the capability ATen dispatches to."""

from __future__ import annotations

import platform
from pathlib import Path

#: CPU flags whose presence changes which kernels MKL / oneDNN / ATen run (Linux /proc/cpuinfo names).
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_bf16", "amx_tile", "amx_int8")


def cpu_model_and_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, list[str]]:
    """(CPU model name, the :data:`ISA_FLAGS` it has, in that order); ``platform.processor()`` and
    no flags where ``/proc/cpuinfo`` is absent (not Linux)."""
    model, flags = None, None
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "flags" and flags is None:
                flags = set(value.split())
    return model or platform.processor() or "unknown", [f for f in ISA_FLAGS if f in (flags or set())]


def cpu_capability() -> str:
    """What ATen dispatches to here (DEFAULT, AVX2, AVX512, ...; honours ``ATEN_CPU_CAPABILITY``)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()
