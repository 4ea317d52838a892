"""The numerics environment: what, besides the code, decides a cpu run's floating-point results.

The same code and weights give bit-identical cpu curves run to run on one machine, but not
across machines: ATen picks vectorised kernels by the CPU's instruction set
(``torch.backends.cpu.get_cpu_capability()``: DEFAULT, AVX2, AVX512, ...) and MKL / oneDNN pick
theirs from the CPU flags, so reductions are summed in other orders. Goldens record this
environment; a run whose environment differs is compared within a band measured across
environments (titanflow.judge.regression, docs/measurements.md) instead of the exact margin.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from titan_cfg.cpu_isa import cpu_capability, cpu_model_and_flags
from titanflow.build_cache import installed_versions

#: Libraries whose version changes the numbers.
NUMERICS_PACKAGES = ("torch", "torchtitan", "transformers")


def numerics_environment(cache_dir: Path | None = None) -> dict:
    """``{"cpu_model", "cpu_capability", "isa_flags", "versions"}`` of this process (JSON-ready).

    ``cpu_capability`` is what ATen dispatches to (it honours ``ATEN_CPU_CAPABILITY``), kept in ``cache_dir`` when
    given (:func:`titan_cfg.cpu_isa.cpu_capability`: read back there without importing torch).
    """
    model, flags = cpu_model_and_flags()
    return {"cpu_model": model, "cpu_capability": cpu_capability(cache_dir), "isa_flags": flags,
            "versions": installed_versions(*NUMERICS_PACKAGES)}


def installed_stack() -> dict:
    """``{"distributions": {name: version}, "digest": 12 hex digits}`` of every Python distribution this process can
    import (importlib.metadata, over ``sys.path``: a venv and any overlay before it; names normalised as PEP 503 does),
    the digest over the sorted ``name==version`` lines. About 0.1 s for the cpu venv's 196 (measured), so it is taken
    per run, not cached."""
    import importlib.metadata

    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # the first on sys.path wins, as an import would
        name = (dist.metadata["Name"] or "").lower().replace("_", "-").replace(".", "-")
        if name and name not in found:
            found[name] = dist.version
    ordered = dict(sorted(found.items()))
    lines = "\n".join(f"{name}=={version}" for name, version in ordered.items())
    return {"distributions": ordered, "digest": hashlib.sha256(lines.encode()).hexdigest()[:12]}


def stack_difference(before: dict | None, after: dict | None) -> list[str]:
    """What differs between two :func:`installed_stack` records: ``+name version`` (added), ``-name version``
    (removed), ``name a -> b`` (changed), in name order; [] when both are the same or either is missing."""
    if not before or not after:
        return []
    old, new = before.get("distributions", {}), after.get("distributions", {})
    lines = []
    for name in sorted(set(old) | set(new)):
        if name not in old:
            lines.append(f"+{name} {new[name]}")
        elif name not in new:
            lines.append(f"-{name} {old[name]}")
        elif old[name] != new[name]:
            lines.append(f"{name} {old[name]} -> {new[name]}")
    return lines


def hardware(node: str, environment: dict | None) -> str | None:
    """What a run computed on, as the key of a node's baselines (titanflow.judge.baselines): ``<node type>: <CPU
    model>, <ATen capability>``; None for a record without an environment. On an accelerator node the node type
    names the accelerator (trn2: Trainium2) and the CPU names the instance's host."""
    if not environment:
        return None
    return f"{node}: {environment.get('cpu_model')}, {environment.get('cpu_capability')}"


def environment_key(environment: dict | None) -> str | None:
    """12 hex digits naming what decides the numbers (capability, ISA flags, versions; not the model
    name, which carries no numerics of its own). None for None (a record from before environments)."""
    if not environment:
        return None
    material = {k: environment.get(k) for k in ("cpu_capability", "isa_flags", "versions")}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


def describe(environment: dict | None) -> str:
    """One line for reports: ``<cpu model>, <capability>, torch <v>``."""
    if not environment:
        return "an unrecorded environment"
    versions = environment.get("versions", {})
    return f"{environment.get('cpu_model')}, {environment.get('cpu_capability')}, torch {versions.get('torch')}"
