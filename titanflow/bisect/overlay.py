"""An environment laid over this one: the packages whose versions differ from this Python's, installed with
``pip install --no-deps --target`` into a folder that goes first on the probe's ``PYTHONPATH``.

    pins = overlay_pins(packages, base_packages())   # {name: version} of what differs from this venv
    folder = ensure_overlay(pins, ["--no-index", "--find-links", "/wheels"])   # <cache>/bisect-envs/overlay-<key>

Why an overlay and not a venv per environment: a bisect over packages probes up to log2(n) + 2 environments that
share all but a few packages; a venv each would copy torch and the stack (gigabytes, minutes) every time, while the
overlay holds only the packages that differ (the changed ones, kilobytes to megabytes) and installs in seconds, and
the base venv is never written. ``--no-deps``: the environment names every version it wants, so pip must not
resolve other versions in; ``--target``: the folder is the overlay, nothing else is touched (as
tests/upstream/overlays.py lays torchtitan snapshots over the cpu venv). A folder on ``PYTHONPATH`` is not a site
folder, so Python would not run the ``.pth`` files a package installs there (an import hook, a patch applied at
start-up); the overlay's ``sitecustomize.py`` (:data:`SITECUSTOMIZE`) makes it one with ``site.addsitedir``, in the
probe's process and in every rank it starts (they inherit ``PYTHONPATH``). The venv holds no sitecustomize of its
own that this one would hide (checked on the cpu profile: ``import sitecustomize`` fails there).

What an overlay cannot do: remove a package the base venv has (a removal leaves the base's version showing, which
the probe's recorded stack says). Each overlay is built once per content key (:func:`overlay_key`), complete or not
at all (under a ``.partial`` name, then renamed), under a file lock.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from titanflow import paths
from titanflow.bisect.environment import ENVS_DIR, EnvironmentUnavailable

#: Seconds pip may take to lay one overlay (downloads of a changed torch or Neuron SDK included).
OVERLAY_TIMEOUT_S = 1800

#: The overlay's sitecustomize.py: its own folder read as a site folder, so the .pth files installed there run.
SITECUSTOMIZE = ('"""The bisect overlay\'s folder as a site folder: its .pth files run (titanflow.bisect.overlay)."""\n'
                 "import os, site\n\nsite.addsitedir(os.path.dirname(os.path.abspath(__file__)))\n")


def base_packages() -> dict[str, str]:
    """{name: version} of every distribution this Python sees (importlib.metadata: the venv, before any overlay),
    names PEP 503-normalised; the first on ``sys.path`` wins, as an import would."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and name not in found:
            found[name] = dist.version
    return found


def overlay_pins(packages: dict[str, str], base: dict[str, str]) -> dict[str, str]:
    """What the overlay of ``packages`` installs: each package whose version differs from ``base``'s (or that
    ``base`` lacks), by name."""
    return {name: version for name, version in sorted(packages.items()) if base.get(name) != version}


def _source_digest(pip_options: list[str]) -> str:
    """What a local ``--find-links`` folder holds (each file's name, size and modification time): a wheel rebuilt
    under the same name is a new key."""
    digest = hashlib.sha256()
    for option in pip_options:
        folder = Path(option)
        if folder.is_absolute() and folder.is_dir():
            for item in sorted(folder.iterdir()):
                stat = item.stat()
                digest.update(f"{item.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def overlay_key(pins: dict[str, str], pip_options: list[str], python: str = sys.executable) -> str:
    """16 hex digits of sha256 over the overlay's content: its pins (sorted ``name==version``), the pip options
    and what their local folders hold, and the base (this Python's path and version)."""
    material = {"pins": sorted(f"{n}=={v}" for n, v in pins.items()), "options": pip_options,
                "sources": _source_digest(pip_options), "python": [str(Path(python).absolute()), sys.version]}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def overlay_dir(pins: dict[str, str], pip_options: list[str], cache_root: Path | None = None) -> Path:
    """``<cache>/bisect-envs/overlay-<key>`` (:func:`overlay_key`; cache default titanflow.paths.cache_root)."""
    return (cache_root or paths.cache_root()) / ENVS_DIR / f"overlay-{overlay_key(pins, pip_options)}"


def ensure_overlay(pins: dict[str, str], pip_options: list[str], cache_root: Path | None = None) -> Path:
    """The overlay folder of ``pins`` installed with ``pip_options``, built first unless it is (module docstring).

    Raises:
        EnvironmentUnavailable: pip failed (a version no index has, a package for another platform: Neuron's off a
            Trainium node); its last lines on the message. The probe is then a skip; nothing is left half-built.
    """
    folder = overlay_dir(pins, pip_options, cache_root)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.with_name(f".{folder.name}.lock"))):
        if (folder / ".installed").is_file():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-deps",
                   "--target", str(partial), *pip_options, *(f"{n}=={v}" for n, v in pins.items())]
        if pins:
            try:
                subprocess.run(command, check=True, capture_output=True, text=True, timeout=OVERLAY_TIMEOUT_S)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
                shutil.rmtree(partial, ignore_errors=True)
                said = "\n".join(f"{err.stdout or ''}{err.stderr or ''}".strip().splitlines()[-8:])
                raise EnvironmentUnavailable(f"the overlay of {', '.join(f'{n}=={v}' for n, v in pins.items())} did "
                                             f"not install: {said}") from None
        (partial / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (partial / "overlay.json").write_text(json.dumps({"pins": pins, "pip_options": pip_options}, indent=1) + "\n")
        (partial / ".installed").touch()
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    return folder


def requirements_in(folder: Path, names: set[str]) -> dict[str, set[str]]:
    """name -> the names it requires (``Requires-Dist`` outside extras) of each distribution of ``names`` installed
    in ``folder`` (an overlay); a name not installed there is read from this Python's installed metadata (an overlay
    holds every version that differs from this venv's, so one it lacks is this venv's), else taken to require
    nothing."""
    found: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions(path=[str(folder)]):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name in names:
            found[name] = _required(dist.requires or [])
    for name in names - set(found):
        try:
            found[name] = _required(importlib.metadata.requires(name) or [])
        except importlib.metadata.PackageNotFoundError:
            found[name] = set()
    return found


def _required(lines: list[str]) -> set[str]:
    kept = (Requirement(line) for line in lines)
    return {canonicalize_name(r.name) for r in kept if r.marker is None or "extra" not in str(r.marker)}
