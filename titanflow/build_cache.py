"""The content-addressed cache the builders share: the assets (titanflow.assets), the trimmed weights and the
tokenizer's largest id (titanflow.weights), the pretrained checkpoints (titanflow.run.pretrained).

A built folder is ``<cache_root>/assets/<name>-<key>/`` where ``key`` hashes everything that
decides its bytes (inputs, library versions, ``FORMAT_VERSION``). A folder appears under its final
name only once complete, so a present folder is a finished one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from filelock import FileLock

from titanflow import paths

log = logging.getLogger(__name__)

#: Bump when a builder changes its output without any input or library version changing.
FORMAT_VERSION = 1


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file's bytes."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def cache_key(parts: Mapping[str, object]) -> str:
    """12 hex digits of the sha256 of ``parts`` as canonical JSON."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def installed_versions(*distributions: str) -> dict[str, str]:
    """{distribution: installed version}.

    Raises:
        importlib.metadata.PackageNotFoundError: one is not installed.
    """
    return {name: importlib.metadata.version(name) for name in distributions}


def build_once(final_dir: Path, build: Callable[[Path], object]) -> Path:
    """Return ``final_dir``, running ``build(tmp_dir)`` first if it does not exist.

    The build writes into a hidden temporary sibling that is renamed onto ``final_dir`` only when
    ``build`` returns, so an interrupted or failed build leaves nothing under the final name (its
    temporary folder is removed; only a hard kill leaves a ``.<name>.*.partial`` sibling behind).
    Processes that need the same folder at once take turns on a file lock (filelock) named by the
    folder's path under ``<cache_root>/locks/``, so nothing is left beside the folder: the first
    builds, the others wait and reuse its result instead of building it again (a pretrained tiny
    checkpoint is minutes of training).
    """
    if final_dir.is_dir():
        return final_dir
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    locks = paths.cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(locks / f"{hashlib.sha256(str(final_dir.resolve()).encode()).hexdigest()[:16]}.lock"):
        if final_dir.is_dir():  # built by the holder we waited for
            return final_dir
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.", suffix=".partial", dir=final_dir.parent))
        try:
            build(tmp_dir)
            tmp_dir.chmod(0o755)  # mkdtemp makes it 0700; give the folder ordinary permissions
            os.replace(tmp_dir, final_dir)
            log.info("built %s", final_dir)
        except OSError:
            if not final_dir.is_dir():  # a real error, not a lost race (a process that took no lock)
                raise
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return final_dir
