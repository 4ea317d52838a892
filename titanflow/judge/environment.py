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
    """``{"distributions": {name: version}, "digest": 12 hex digits, "sources": {name: {"url", "commit"}},
    "system": system()}`` of every Python distribution this process can import (importlib.metadata, over
    ``sys.path``: a venv and any overlay before it; names normalised as PEP 503 does), the digest over the sorted
    ``name==version`` lines; ``sources``: each installed from a local folder (pip's direct_url.json: an editable
    titanflow, a fork's checkout) with the folder and, in a git checkout, its commit. About 0.1 s for the cpu venv's
    196 distributions (measured), so it is taken per run, not cached."""
    import importlib.metadata
    import json as json_module

    found: dict[str, str] = {}
    sources: dict[str, dict] = {}
    for dist in importlib.metadata.distributions():  # the first on sys.path wins, as an import would
        name = (dist.metadata["Name"] or "").lower().replace("_", "-").replace(".", "-")
        if not name or name in found:
            continue
        found[name] = dist.version
        direct = dist.read_text("direct_url.json")
        url = json_module.loads(direct).get("url", "") if direct else ""
        if url.startswith("file://"):
            sources[name] = {"url": url, "commit": _commit(Path(url.removeprefix("file://")))}
    ordered = dict(sorted(found.items()))
    lines = "\n".join(f"{name}=={version}" for name, version in ordered.items())
    return {"distributions": ordered, "digest": hashlib.sha256(lines.encode()).hexdigest()[:12],
            "sources": sources, "system": system()}


def _commit(folder: Path) -> str:
    """The git commit checked out in ``folder``, or why there is none."""
    import subprocess

    if not (folder / ".git").exists():
        return "not a git checkout"
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False, timeout=10)
    return done.stdout.strip() if done.returncode == 0 else f"git: {done.stderr.strip()[:120]}"


#: Where the instance type is read on EC2 (the Nitro hypervisor's DMI product name: trn2.48xlarge).
INSTANCE_TYPE_FILE = Path("/sys/devices/virtual/dmi/id/product_name")
#: The loaded Neuron driver's version.
NEURON_DRIVER_FILE = Path("/sys/module/neuron/version")


def system() -> dict[str, str]:
    """What the node is, beyond Python: ``kernel``, ``glibc``, ``cpu``, ``instance_type``, ``neuron_driver``,
    ``neuronx_cc`` (``neuronx-cc --version``), ``aws_neuronx_packages`` (the ``aws-neuronx-*`` Debian packages, dpkg),
    ``lnc`` (``NEURON_LOGICAL_NC_CONFIG``). A figure that cannot be read here says why (``not here: ...``), never an
    empty string."""
    import os
    import platform
    import shutil
    import subprocess

    def read(path: Path, what: str) -> str:
        return path.read_text().strip() if path.is_file() else f"not here: no {path} ({what})"

    libc, libc_version = platform.libc_ver()
    found = {"kernel": platform.release(), "glibc": f"{libc} {libc_version}".strip() or "not here: no C library found",
             "cpu": cpu_model_and_flags()[0] or "not here: /proc/cpuinfo names no model",
             "instance_type": read(INSTANCE_TYPE_FILE, "not an EC2 instance, or its DMI is not readable"),
             "neuron_driver": read(NEURON_DRIVER_FILE, "the Neuron driver is not loaded")}
    compiler = shutil.which("neuronx-cc")
    if compiler is None:
        found["neuronx_cc"] = "not here: neuronx-cc is not on PATH"
    else:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False, timeout=60)
        found["neuronx_cc"] = (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr) \
            else f"not here: neuronx-cc --version printed nothing (exit {done.returncode})"
    if shutil.which("dpkg-query") is None:
        found["aws_neuronx_packages"] = "not here: no dpkg-query (not a Debian or Ubuntu system)"
    else:
        done = subprocess.run(["dpkg-query", "-W", "-f", "${Package}=${Version}\n", "aws-neuronx-*"],
                              capture_output=True, text=True, check=False, timeout=30)
        installed = [line for line in done.stdout.splitlines() if line and not line.endswith("=")]
        found["aws_neuronx_packages"] = ", ".join(installed) or "not here: no aws-neuronx-* package is installed"
    found["lnc"] = os.environ.get("NEURON_LOGICAL_NC_CONFIG") or "not here: NEURON_LOGICAL_NC_CONFIG is not set " \
        "(the target's LNC is set in each rank's environment: titan_cfg.targets)"
    return found


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
