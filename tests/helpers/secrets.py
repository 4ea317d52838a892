"""``assert_secret_absent``: prove a secret was written nowhere under some folders.

Every file is searched as bytes (the secret's UTF-8), which covers text, JSON, logs and the
SQLite database of a Prefect server (with its ``-wal``/``-journal`` files) whose block documents
are stored encrypted. Parquet pages may be compressed, so a ``.parquet`` file is also read back
with pyarrow and every cell searched as text.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from pathlib import Path


def _offset(path: Path, needle: bytes) -> int:
    """Byte offset of ``needle`` in the file, -1 if absent (memory-mapped: exported weights can be GBs)."""
    if path.stat().st_size == 0:
        return -1
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(needle)


def _parquet_holds(path: Path, secret: str) -> bool:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return any(secret in str(value) for column in table.columns for value in column.to_pylist())


def assert_secret_absent(roots: Path | Iterable[Path], secret: str) -> int:
    """Assert that no file under ``roots`` (a folder or file, or several) contains ``secret``;
    returns how many files were searched, so a caller can assert the search saw something.

    Raises:
        ValueError: ``secret`` is shorter than 8 characters (it would match by chance) or a root is missing.
        AssertionError: naming each file (and byte offset) that holds it; the message never contains the secret.
    """
    if len(secret) < 8:
        raise ValueError(f"secret has {len(secret)} characters: plant one of at least 8, e.g. 'hf_PLANTEDtoken123'")
    roots = [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]
    needle = secret.encode()
    searched, found = 0, []
    for root in roots:
        if not root.exists():
            raise ValueError(f"{root} does not exist: pass the run folder and the Prefect home that were written")
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            searched += 1
            offset = _offset(path, needle)
            if offset >= 0:
                found.append(f"{path} (byte {offset})")
            elif path.suffix == ".parquet" and _parquet_holds(path, secret):
                found.append(f"{path} (a parquet cell)")
    assert not found, f"the secret was written to {len(found)} file(s): " + ", ".join(found)
    return searched
