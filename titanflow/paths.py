"""Where titanflow reads and writes on disk.

Every run writes under ``runs/<run-id>/``; shared, content-addressed caches
(built assets, compile caches) live under the cache root. Both roots can be
moved with environment variables so CI and users can point them elsewhere. A folder is probed for writing
(:func:`check_writable`) before anything is computed into it, and a full disk is told as :class:`DiskFull`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path

#: The repository root (this file lives in ``<root>/titanflow/``).
REPO_ROOT = Path(__file__).resolve().parent.parent

#: Assets committed with the repository (the real-text dataset and its provenance).
SHIPPED_ASSETS = REPO_ROOT / "assets"


def cache_root() -> Path:
    """Root of the content-addressed caches: ``$TITANFLOW_CACHE`` or, unset or empty, ``<repo>/.cache``."""
    return _root("TITANFLOW_CACHE", REPO_ROOT / ".cache")


def runs_root() -> Path:
    """Default parent of ``<run-id>/`` folders: ``$TITANFLOW_RUNS`` or, unset or empty, ``<repo>/runs``."""
    return _root("TITANFLOW_RUNS", REPO_ROOT / "runs")


def history_root() -> Path:
    """Folder of the run-history table (titanflow.record.history): ``$TITANFLOW_HISTORY`` or, unset or empty,
    ``<repo>/history``."""
    return _root("TITANFLOW_HISTORY", REPO_ROOT / "history")


def _root(variable: str, default: Path) -> Path:
    """``$variable`` as an absolute folder, or ``default`` when it is unset or empty (``Path("")`` is the working
    folder: an empty variable would put the caches, runs or history wherever the command was started)."""
    return Path(os.environ.get(variable) or default).resolve()


def check_writable(folder: Path, field: str, fix: str) -> None:
    """Fail before compute when ``folder`` cannot be created and written.

    Creates ``folder`` if needed and writes (then removes) one probe file; a
    permission check alone is not enough (root passes every ``os.access``). The folders it made are removed again:
    nothing is left of a run refused later.

    Raises:
        ValueError: ``<field>: <folder> is a file, not a folder; fix: <fix>``, or ``<field>: <folder> is not writable
            (<OS error>); fix: <fix>``.
    """
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        if folder.exists() and not folder.is_dir():  # mkdir would say "File exists", which reads as a folder there
            raise ValueError(f"{field}: {folder} is a file, not a folder; fix: {fix}")
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
        for new in made:  # deepest first; one another process filled meanwhile is kept
            with contextlib.suppress(OSError):
                new.rmdir()
    except OSError as err:
        why = err.strerror or str(err)
        if err.errno == errno.ENOENT and folder.is_dir():  # /proc, /sys: the folder is there, a new file is refused
            why = f"the folder exists but its file system takes no new file: {why}"
        raise ValueError(f"{field}: {folder} is not writable ({why}); fix: {fix}") from None


def check_runs_dir_writable(root: Path) -> None:
    """Fail before compute when the runs folder cannot be created and written (:func:`check_writable`).

    Raises:
        ValueError: names ``runs_dir``, the path and the OS error.
    """
    check_writable(root, "runs_dir", "pass --runs-dir a folder you can write")


#: errno values of a full file system: no space left (ENOSPC), a disk quota reached (EDQUOT).
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

#: How a full file system reads in an error or a log: the OS's words for :data:`FULL_ERRNOS`, their names, and
#: :class:`DiskFull`'s own start.
DISK_FULL_TEXT = r"No space left on device|\[Errno 28\]|\bENOSPC\b|Disk quota exceeded|\bEDQUOT\b|\bdisk full: "

#: A file of :data:`RESERVE_BYTES` a run folder keeps from its start (:func:`reserve_space`), given up the first time
#: a record in that folder cannot be written for want of space: the run's record and curve are small, so a run whose
#: disk filled up still writes what happened.
RESERVE = ".space-reserve"
RESERVE_BYTES = 2**20


class DiskFull(OSError):
    """A write failed because its file system is full (:data:`FULL_ERRNOS`); the message names what was being written,
    the folder, the bytes free there and the fix."""


def nearest_existing(folder: Path) -> Path:
    """``folder`` or its nearest parent that exists (where a folder not made yet will be)."""
    return next(p for p in (folder, *folder.parents) if p.exists())


def disk_full(err: OSError, path: Path, what: str) -> DiskFull:
    """``err`` (errno in :data:`FULL_ERRNOS`) said as :class:`DiskFull`: ``disk full: <what> could not be written to
    <path>: <folder> has <N> bytes free (errno <name>); fix: ...``."""
    folder = nearest_existing(Path(path).parent)
    try:
        free = f"{shutil.disk_usage(folder).free:,} bytes free"
    except OSError:
        free = "its free space unreadable"
    return DiskFull(err.errno, f"disk full: {what} could not be written to {path}: {folder} has {free} "
                               f"({errno.errorcode.get(err.errno, err.errno)}); fix: free space there, or move the "
                               f"runs folder (--runs-dir) or the history ($TITANFLOW_HISTORY) to a larger disk")


def reserve_space(folder: Path) -> None:
    """Keep :data:`RESERVE_BYTES` in ``folder`` (:data:`RESERVE`), unless it is there already; a full disk leaves none."""
    reserve = Path(folder) / RESERVE
    if reserve.exists():
        return
    try:
        with open(reserve, "wb") as handle:
            handle.write(os.urandom(RESERVE_BYTES))  # not zeros: a compressing file system would keep no room
    except OSError as err:
        reserve.unlink(missing_ok=True)
        if err.errno not in FULL_ERRNOS:
            raise


def write_atomic(path: Path, data: str | bytes, what: str | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a hidden temporary sibling, flushed to disk,
    then ``os.replace``: a reader sees the old file or the new one, never half of it, and a crash
    leaves at most the temporary file; a failed write removes it. When the disk is full and ``path``'s folder keeps
    a :data:`RESERVE`, the reserve is given up and the write tried once more. Returns ``path``.

    Raises:
        DiskFull: the file system is full (and no reserve made room): names ``what`` (default the file's name).
        OSError: any other failure to write.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    reserve = path.parent / RESERVE
    try:
        return _replace_with(path, payload)
    except OSError as err:
        if err.errno not in FULL_ERRNOS:
            raise
        if not reserve.exists():
            raise disk_full(err, path, what or path.name) from err
    reserve.unlink()  # room for this record; the reserve is not made again
    try:
        return _replace_with(path, payload)
    except OSError as err:
        if err.errno in FULL_ERRNOS:
            raise disk_full(err, path, what or path.name) from err
        raise


def _replace_with(path: Path, payload: bytes) -> Path:
    """:func:`write_atomic`'s one attempt; the temporary file removed when it fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
