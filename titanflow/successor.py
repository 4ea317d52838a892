"""A profile's successor and the venv each side of a canary runs in.

    pinned, successor = canary_sides("cpu-lowest")   # .venv-lowest, then .venv (profiles/cpu-lowest/successor)

A profile is the folder ``profiles/<name>/``. Its successor, the next stack to try beside it, is named in one of
two ways, first found:

- the file ``profiles/<name>/successor``: one line, the successor's profile name (``cpu`` for ``cpu-lowest``: the
  lowest lane's successor is the newest end of the ranges);
- the folder ``profiles/<name>-next/``: the next release's pins, written beside the pinned ones (``trn2-next`` for
  the next Neuron SDK; docs/trn2.md).

Each profile runs in a venv of its own: ``$TITANFLOW_VENV_<NAME>`` (upper case, ``-`` as ``_``:
``TITANFLOW_VENV_TRN2_NEXT``) when set, else the Makefile's (:data:`MAKEFILE_VENVS`: ``.venv`` from ``make setup``,
``.venv-lowest`` from ``make setup-lowest``), else ``.venv-<name>`` at the repository root. Every check is made
before anything runs; a refusal names the file or variable and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from titanflow.paths import REPO_ROOT

#: The file of a profile's folder that names its successor.
SUCCESSOR_FILE = "successor"
#: The suffix of a successor found by its folder's name alone: ``profiles/<name>-next/``.
NEXT_SUFFIX = "-next"
#: The venvs the Makefile builds, relative to the repository root, and the command that builds each: ``VENV``
#: (profile cpu) and ``LOWEST`` (profile cpu-lowest); tests/unit/test_successor.py holds them to the
#: Makefile's lines.
MAKEFILE_VENVS = {"cpu": (".venv", "make setup"), "cpu-lowest": (".venv-lowest", "make setup-lowest")}

Role = Literal["pinned", "successor"]


class CanarySide(BaseModel):
    """One side of a canary: ``role`` (pinned or successor), its ``profile`` and the ``python`` of its ``venv``."""

    role: Role
    profile: str
    venv: str
    python: str


def profiles_dir(root: Path = REPO_ROOT) -> Path:
    """``<root>/profiles``: one folder per install profile."""
    return root / "profiles"


def venv_variable(profile: str) -> str:
    """The environment variable that names ``profile``'s venv: ``TITANFLOW_VENV_TRN2_NEXT`` for ``trn2-next``."""
    return "TITANFLOW_VENV_" + profile.upper().replace("-", "_")


def successor_of(profile: str, root: Path = REPO_ROOT) -> str | None:
    """The name of ``profile``'s successor (module docstring); None when it names none.

    Raises:
        ValueError: ``profile`` has no folder; its successor file is empty, names ``profile`` itself or a profile
            without a folder; the message names the file and the fix.
    """
    folder = profiles_dir(root) / profile
    if not folder.is_dir():
        known = sorted(p.name for p in profiles_dir(root).iterdir() if p.is_dir())
        raise ValueError(f"profile: {profile!r} has no folder {folder}; fix: pass one of {', '.join(known)}")
    named = folder / SUCCESSOR_FILE
    if named.is_file():
        successor = named.read_text().strip()
        if not successor:
            raise ValueError(f"{named}: empty; fix: write the successor's profile name on its one line, or delete it")
        if successor == profile:
            raise ValueError(f"{named}: names {profile!r} itself; fix: name the next stack's profile "
                             f"(a folder of {profiles_dir(root)}), or delete the file")
        if not (profiles_dir(root) / successor).is_dir():
            raise ValueError(f"{named}: names {successor!r}, which has no folder {profiles_dir(root) / successor}; "
                             f"fix: create that profile (its constraints.txt), or name an existing one")
        return successor
    return profile + NEXT_SUFFIX if (profiles_dir(root) / (profile + NEXT_SUFFIX)).is_dir() else None


def venv_of(profile: str, environ: Mapping[str, str] = os.environ, root: Path = REPO_ROOT) -> tuple[Path, str]:
    """``profile``'s venv (module docstring) and the fix that builds it, for a venv that is missing."""
    variable = venv_variable(profile)
    if environ.get(variable, "").strip():
        return Path(environ[variable].strip()), f"build the venv {environ[variable].strip()}, or unset {variable}"
    if profile in MAKEFILE_VENVS:
        folder, command = MAKEFILE_VENVS[profile]
        return root / folder, f"{command}, or set {variable} to a venv of the {profile} profile"
    return (root / f".venv-{profile}",
            f"install profiles/{profile} into a venv and set {variable} to it (default {root / f'.venv-{profile}'})")


def canary_sides(profile: str, environ: Mapping[str, str] = os.environ,
                 root: Path = REPO_ROOT) -> tuple[CanarySide, CanarySide]:
    """The pinned side (``profile``) and its successor's, each with the Python of its venv, checked before
    anything runs.

    Raises:
        ValueError: ``profile`` names no successor, or a bad successor (:func:`successor_of`), or a side's venv
            has no ``bin/python`` (the fix builds it or names the variable to set); the sides' venvs are the same.
    """
    successor = successor_of(profile, root)
    if successor is None:
        raise ValueError(f"profile: {profile!r} names no successor; fix: write the successor's name in "
                         f"{profiles_dir(root) / profile / SUCCESSOR_FILE}, or create "
                         f"{profiles_dir(root) / (profile + NEXT_SUFFIX)}/ with the next stack's pins")
    sides = []
    for role, name in (("pinned", profile), ("successor", successor)):
        venv, fix = venv_of(name, environ, root)
        python = venv / "bin" / "python"
        if not python.exists():
            raise ValueError(f"{venv_variable(name)}: the {role} profile {name!r} has no venv at {venv} "
                             f"({python} is missing); fix: {fix}")
        sides.append(CanarySide(role=role, profile=name, venv=str(venv), python=str(python)))
    if Path(sides[0].venv).resolve() == Path(sides[1].venv).resolve():
        raise ValueError(f"{venv_variable(successor)}: {successor!r} runs in the venv of {profile!r} "
                         f"({sides[0].venv}): the canary would compare a stack with itself; fix: give each its own venv")
    return sides[0], sides[1]
