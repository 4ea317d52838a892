"""A step checkpoint proven against its own DCP metadata before a launch loads it; one that fails is set aside.

    from titanflow.launch.step_checkpoint import damage, set_aside
    found = damage(Path("runs/<id>/train/checkpoint/step-6"))
    # Damage(reason="truncated-shard", detail="__1_0.distcp has 5,242,880 bytes; its .metadata records 56,623,104")
    set_aside(Path("runs/<id>/train/checkpoint/step-6"), found.reason)
    # runs/<id>/train/checkpoint/set-aside/step-6.broken-truncated-shard

torch.distributed.checkpoint (DCP) writes each rank's items into ``__<rank>_<n>.distcp`` files and, last, the
``.metadata`` that names for every item its file, offset and length (``Metadata.storage_data``: ``_StorageInfo``
with ``relative_path``, ``offset``, ``length``). A node that lost power before its file system flushed can leave a
folder whose ``.metadata`` is there and whose shards are shorter or missing: torchtitan takes it for a complete save
and every rank fails inside ``dcp.load``. :func:`damage` reads the metadata with DCP's own ``FileSystemReader``
(``read_metadata``) and checks, for every file it names, that the file exists and holds at least the bytes its items
end at (``offset + length``): a stat per file, no tensor read, so milliseconds for a checkpoint of tens of GB. Bytes
that are there but wrong (zeros where a flush never came) pass it and fail inside the ranks: titanflow.launch.torchrun
then sets that checkpoint aside as ``load-failed`` (failure class ``checkpoint``).

A checkpoint that fails is set aside, never deleted: moved to ``<checkpoint folder>/set-aside/step-N.broken-<reason>``.
Not renamed in place: torchtitan finds step folders with ``re.search(r"step-(\\d+)", name)`` over the checkpoint
folder (``_find_load_step``, and ``_purge_stale_checkpoints``, which deletes all but the newest ``keep_latest_k``), so
``step-6.broken-...`` beside the others would still be loaded or purged; a folder of its own, ``set-aside``, is neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Where set-aside step checkpoints go, inside the checkpoint folder (module docstring).
SET_ASIDE = "set-aside"
#: The reasons a step checkpoint is set aside, as its new name ends (``step-6.broken-<reason>``).
REASONS = {
    "unreadable-metadata": "its DCP .metadata cannot be read",
    "missing-shard": "a file its .metadata names is missing",
    "truncated-shard": "a file is shorter than its .metadata records",
    "load-failed": "the ranks could not load it, though its files are all there",
}


@dataclass(frozen=True)
class Damage:
    """Why a step checkpoint cannot be loaded: ``reason`` one of :data:`REASONS`; ``detail`` the file and sizes."""

    reason: str
    detail: str


def damage(step_dir: Path) -> Damage | None:
    """What is wrong with the DCP step checkpoint ``step_dir`` as its own ``.metadata`` describes it (module
    docstring), or None when every file it names is there with at least the bytes (``offset + length``) its items
    end at. Reads the metadata (DCP's ``FileSystemReader.read_metadata``) and stats each file; loads no tensor."""
    from torch.distributed.checkpoint import FileSystemReader  # the check only: torch stays out of the module

    try:
        metadata = FileSystemReader(str(step_dir)).read_metadata()
    except Exception as err:  # noqa: BLE001 - a truncated pickle raises any of several types: all mean unreadable
        return Damage("unreadable-metadata", f".metadata cannot be read: {type(err).__name__}: {err}"[:300])
    needed: dict[str, int] = {}  # file -> bytes its items end at
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        path = step_dir / name
        if not path.is_file():
            return Damage("missing-shard", f"{name} is missing; its .metadata records {size:,} bytes in it")
        have = path.stat().st_size
        if have < size:
            return Damage("truncated-shard", f"{name} has {have:,} bytes; its .metadata records {size:,}")
    return None


def set_aside(step_dir: Path, reason: str) -> Path:
    """Move the step checkpoint ``step_dir`` to ``<its folder>/set-aside/<name>.broken-<reason>`` (``-2``, ``-3``
    after it when that name is taken), where torchtitan neither loads nor purges it; returns where it went.

    Raises:
        ValueError: ``reason`` is not one of :data:`REASONS`.
        OSError: it could not be moved (the launch must not start: torchtitan would load it).
    """
    if reason not in REASONS:
        raise ValueError(f"reason: {reason!r}; fix: one of {', '.join(REASONS)}")
    folder = step_dir.parent / SET_ASIDE
    folder.mkdir(exist_ok=True)
    target, n = folder / f"{step_dir.name}.broken-{reason}", 1
    while target.exists():
        n += 1
        target = folder / f"{step_dir.name}.broken-{reason}-{n}"
    step_dir.rename(target)
    return target


def set_aside_folders(checkpoint_folder: Path) -> list[Path]:
    """The step checkpoints set aside in ``checkpoint_folder`` so far, by name; [] when none."""
    folder = checkpoint_folder / SET_ASIDE
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
