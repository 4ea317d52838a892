"""Where titanflow reads and writes on disk.

Every run writes under ``runs/<run-id>/``; shared, content-addressed caches
(built assets, compile caches) live under the cache root. Both roots can be
moved with environment variables so CI and users can point them elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (this file lives in ``<root>/titanflow/``).
REPO_ROOT = Path(__file__).resolve().parent.parent

#: Assets committed with the repository (the real-text dataset and its provenance).
SHIPPED_ASSETS = REPO_ROOT / "assets"


def cache_root() -> Path:
    """Root of the content-addressed caches: ``$TITANFLOW_CACHE`` or ``<repo>/.cache``."""
    return Path(os.environ.get("TITANFLOW_CACHE", REPO_ROOT / ".cache")).resolve()


def runs_root() -> Path:
    """Default parent of ``<run-id>/`` folders: ``$TITANFLOW_RUNS`` or ``<repo>/runs``."""
    return Path(os.environ.get("TITANFLOW_RUNS", REPO_ROOT / "runs")).resolve()


def history_root() -> Path:
    """Folder of the run-history table (titanflow.record.history): ``$TITANFLOW_HISTORY`` or ``<repo>/history``."""
    return Path(os.environ.get("TITANFLOW_HISTORY", REPO_ROOT / "history")).resolve()


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a hidden temporary sibling, flushed to disk,
    then ``os.replace``: a reader sees the old file or the new one, never half of it, and a crash
    leaves at most the temporary file. Returns ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path
