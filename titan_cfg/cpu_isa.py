"""This machine's CPU as the numerics see it: its model, the instruction-set flags that decide which
kernels MKL / oneDNN / ATen run and inductor generates, and the capability ATen dispatches to."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

#: CPU flags whose presence changes which kernels MKL / oneDNN / ATen run (Linux /proc/cpuinfo names).
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_bf16", "amx_tile", "amx_int8")


def _cpuinfo(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str | None, set[str]]:
    """(the first ``model name``, the first ``flags`` line's flags) of ``cpuinfo``; (None, empty) where it is absent."""
    model, flags = None, None
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "flags" and flags is None:
                flags = set(value.split())
    return model, flags or set()


def cpu_model_and_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, list[str]]:
    """(CPU model name, the :data:`ISA_FLAGS` it has, in that order); ``platform.processor()`` and
    no flags where ``/proc/cpuinfo`` is absent (not Linux)."""
    model, flags = _cpuinfo(cpuinfo)
    return model or platform.processor() or "unknown", [f for f in ISA_FLAGS if f in flags]


def capability_key() -> str:
    """16 hex digits of what decides :func:`cpu_capability` without asking torch: torch's installed version, this
    CPU's model and every flag it reports, the machine type and ``ATEN_CPU_CAPABILITY`` (which ATen honours)."""
    model, flags = _cpuinfo()
    material = {"torch": importlib.metadata.version("torch"), "model": model, "flags": sorted(flags),
                "machine": platform.machine(), "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY")}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def _read(kept: Path) -> str:
    """The capability kept in ``kept``; "" when there is none (no file, or an empty one)."""
    try:
        return kept.read_text().strip()
    except OSError:
        return ""


def cpu_capability(cache_dir: Path | None = None) -> str:
    """What ATen dispatches to here (DEFAULT, AVX2, AVX512, ...; honours ``ATEN_CPU_CAPABILITY``), from
    ``torch.backends.cpu.get_cpu_capability()``.

    With ``cache_dir`` the answer is also kept in ``<cache_dir>/cpu-capability/<capability_key()>``, and a process
    that has not imported torch reads it from there instead: importing torch only to ask took 2.6-4.2 s of a
    scenario flow's way to its launch when every task before training came from Prefect's cache (py-spy, native
    cpu, 3 steps, 2 cores, 2026-12-02). A process that has imported torch asks it.
    """
    kept = cache_dir / "cpu-capability" / capability_key() if cache_dir is not None else None
    if kept is not None and "torch" not in sys.modules:
        answer = _read(kept)
        if answer:
            return answer
    import torch

    answer = torch.backends.cpu.get_cpu_capability()
    if kept is not None and _read(kept) != answer:  # written whole, then renamed: a reader never sees half of it
        kept.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=kept.parent, delete=False) as part:
            part.write(answer)
        os.replace(part.name, kept)
    return answer
