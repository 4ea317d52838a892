"""Small real step checkpoints: torch.distributed.checkpoint's own save in this process (DCP's single-process mode),
so a test checks what DCP writes (``__0_0.distcp``, ``.metadata`` last), not a stand-in, and damages it as a node that
lost power would leave it."""

from __future__ import annotations

import warnings
from pathlib import Path

#: The one data file DCP's single-process save writes (``__<rank>_<n>.distcp``).
SHARD = "__0_0.distcp"


def dcp_save(folder: Path, step: int) -> Path:
    """``folder/step-<step>``: a complete DCP save of a two-tensor state (a 64 x 64 weight, 4 KiB of float32 each,
    and the step), as torchtitan's full-state save is laid out: its data, then ``.metadata``."""
    import torch
    import torch.distributed.checkpoint as dcp

    step_dir = folder / f"step-{step}"
    state = {"model.w": torch.full((64, 64), float(step)), "optimizer.m": torch.zeros(64, 64), "step": step}
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=str(step_dir))
    return step_dir


def truncate_shard(step_dir: Path, keep: int = 1024) -> int:
    """Cut ``step_dir``'s shard to its first ``keep`` bytes (a file system that had not flushed the rest); returns
    the size it had."""
    path = step_dir / SHARD
    size = path.stat().st_size
    with open(path, "r+b") as shard:
        shard.truncate(keep)
    return size


def zero_shard(step_dir: Path) -> int:
    """Overwrite ``step_dir``'s shard with zeros at its full size (blocks allocated, never written): every file is
    there with its bytes, so only a load sees it; returns the size."""
    path = step_dir / SHARD
    size = path.stat().st_size
    path.write_bytes(b"\0" * size)
    return size
