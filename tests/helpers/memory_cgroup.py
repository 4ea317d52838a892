"""A memory cgroup of its own, under the one this process runs in, with a memory limit: for tests of processes the
kernel's out-of-memory killer ends (titanflow.launch.oom). Needs a writable cgroup file system (root, as in CI)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from titanflow.launch.oom import memory_cgroup


@contextlib.contextmanager
def limited_cgroup(limit_bytes: int) -> Iterator[Path]:
    """A child memory cgroup limited to ``limit_bytes`` (cgroup v1 ``memory.limit_in_bytes``, v2 ``memory.max``);
    a process joins it by writing its pid to ``<folder>/cgroup.procs``. Removed afterwards (its processes gone)."""
    parent = memory_cgroup()
    if parent is None:
        pytest.fail("no memory cgroup readable here (/proc/self/cgroup, /sys/fs/cgroup)")
    folder = parent / f"titanflow-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
    except OSError as err:
        pytest.fail(f"cannot make a memory cgroup under {parent} (needs root): {err}")
    try:
        limit = folder / ("memory.max" if (folder / "memory.max").exists() else "memory.limit_in_bytes")
        limit.write_text(str(limit_bytes))
        yield folder
    finally:
        for pid in (folder / "cgroup.procs").read_text().split():  # move any survivor back before removing it
            with contextlib.suppress(OSError):
                (parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
