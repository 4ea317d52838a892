"""Which Python a revision's probe runs with: this environment when the revision's dependencies are the ones it
was installed from, else a virtual environment of their own, built once and reused by their hash.

    key = dependency_key(lambda path: file_at(repo, revision, path))
    plan = plan_environment(key)              # this Python, or a venv under <cache>/bisect-envs/<key>
    python = ensure_environment(plan, worktree)

The dependencies are :data:`DEPENDENCY_FILES`, the inputs of the Makefile's install (its ``$(STAMP)`` rule),
as pip reads them (:func:`dependency_text`): two revisions whose files differ only in comments or layout install
the same packages and share a key. A venv is built by the revision's own
Makefile, ``make -C <worktree> setup VENV=<venv>`` (the cpu install profile: torch alone first, then the
project with its extra ``cpu`` under profiles/cpu/constraints.txt), under a file lock so two bisects never
build one venv at once; the Makefile's stamp (``<venv>/.installed``) marks it complete, and a build that
stopped half-way is finished by the next one. That install puts the worktree's titanflow in the venv as an
editable install; the worktree is removed after its probe, and every probe imports its own revision's code
from its worktree, which is first on ``sys.path`` (the working directory and ``PYTHONPATH``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel

from titanflow import paths

#: The files that decide what the Makefile installs (``$(STAMP): pyproject.toml profiles/cpu/constraints.txt``).
DEPENDENCY_FILES = ("pyproject.toml", "profiles/cpu/constraints.txt")

#: Folder of the cache root holding one venv per dependency key.
ENVS_DIR = "bisect-envs"

#: Seconds a venv build may take: an hour, room for downloading torch and the stack when pip's cache lacks them.
INSTALL_TIMEOUT_S = 3600


#: What of pyproject.toml decides an install: the build system and the project's Python and dependencies.
PYPROJECT_KEYS = (("build-system",), ("project", "requires-python"), ("project", "dependencies"),
                  ("project", "optional-dependencies"))


def dependency_text(name: str, data: bytes | None) -> str:
    """What of the file ``name`` decides an install, as canonical text: for pyproject.toml the
    :data:`PYPROJECT_KEYS` as sorted JSON (the raw text when it is not valid TOML), for a constraints file its
    requirement lines without comments, sorted (pip ignores ``#`` comments and the order of constraints);
    ``absent`` for a file the revision lacks."""
    if data is None:
        return "absent"
    text = data.decode("utf-8", "replace")
    if name.endswith(".toml"):
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return text
        chosen = {".".join(path): _dig(parsed, path) for path in PYPROJECT_KEYS}
        return json.dumps(chosen, sort_keys=True)
    return "\n".join(sorted(filter(None, (line.split("#", 1)[0].strip() for line in text.splitlines()))))


def _dig(table: dict, path: tuple[str, ...]):
    for key in path:
        table = table.get(key) if isinstance(table, dict) else None
    return table


def dependency_key(read: Callable[[str], bytes | None]) -> str:
    """16 hex digits of sha256 over :func:`dependency_text` of each of :data:`DEPENDENCY_FILES`, read with
    ``read(path)`` (bytes, None when absent): ``revisions.file_at`` for a revision, the disk for this checkout."""
    digest = hashlib.sha256()
    for name in DEPENDENCY_FILES:
        digest.update(f"{name}\0{dependency_text(name, read(name))}\0".encode())
    return digest.hexdigest()[:16]


def current_key(root: Path = paths.REPO_ROOT) -> str:
    """:func:`dependency_key` of the checkout this environment was installed from (the files on disk)."""
    return dependency_key(lambda name: (root / name).read_bytes() if (root / name).is_file() else None)


class EnvironmentUnavailable(RuntimeError):
    """A probe's environment cannot be had (its build failed, or none can be built for its target): the probe is
    a skip, the message says why."""


class EnvironmentPlan(BaseModel):
    """Where a probe's Python comes from: ``python`` (a path), this process's (``reused``) or the venv at
    ``venv``, built by ``install`` (argv, run in the revision's worktree) when its stamp is missing; ``install``
    None: none can be built (a target other than cpu)."""

    key: str
    reused: bool
    python: str
    venv: str | None = None
    install: list[str] | None = None

    def describe(self) -> str:
        """``this environment (<key>)`` or ``venv <path> (<key>)``."""
        return f"this environment ({self.key})" if self.reused else f"venv {self.venv} ({self.key})"


def plan_environment(key: str, target: str = "cpu", current: str | None = None,
                     cache_root: Path | None = None) -> EnvironmentPlan:
    """The plan for a revision whose dependency key is ``key``: this Python (``sys.executable``) when ``key`` is
    ``current`` (default :func:`current_key`), else ``<cache_root>/bisect-envs/<key>`` (default
    :func:`titanflow.paths.cache_root`) built with the Makefile's ``setup`` target, the cpu install profile: for
    another ``target`` (trn2: the Neuron venv of the node) there is no venv to build."""
    if key == (current if current is not None else current_key()):
        return EnvironmentPlan(key=key, reused=True, python=sys.executable)
    venv = (cache_root or paths.cache_root()) / ENVS_DIR / key
    return EnvironmentPlan(key=key, reused=False, python=str(venv / "bin" / "python"), venv=str(venv),
                           install=["make", "setup", f"VENV={venv}"] if target == "cpu" else None)


def ensure_environment(plan: EnvironmentPlan, worktree: Path) -> str:
    """The probe's Python: ``plan.python``, after building its venv in ``worktree`` unless its stamp is there.

    Raises:
        EnvironmentUnavailable: no venv can be built for the target, or the install failed (the end of its
            output on the message); the probe is then a skip.
    """
    if plan.reused:
        return plan.python
    if plan.install is None:
        raise EnvironmentUnavailable(f"the revision's dependencies ({plan.key}) differ from this environment's "
                                     f"({current_key()}) and a bisect builds venvs for the cpu profile only: install "
                                     "the revision's dependencies here, or bisect revisions that share them")
    venv = Path(plan.venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv.with_name(f".{venv.name}.lock"))):
        if not (venv / ".installed").is_file():
            try:
                subprocess.run(plan.install, cwd=worktree, check=True, capture_output=True, text=True,
                               timeout=INSTALL_TIMEOUT_S)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
                output = f"{err.stdout or ''}{err.stderr or ''}"
                raise EnvironmentUnavailable(f"{' '.join(plan.install)} failed in {worktree}: {output[-2000:]}") \
                    from err
    return plan.python
