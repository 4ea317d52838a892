"""titanflow.launch.step_checkpoint: a step checkpoint checked against its own DCP metadata (every file it names
there with the bytes its items end at), set aside where torchtitan neither loads nor purges it. The checkpoints are
DCP's own saves (helpers.dcp_saves), damaged as a node that lost power before its file system flushed leaves them."""

from __future__ import annotations

import warnings

import pytest
from helpers.dcp_saves import SHARD, dcp_save, truncate_shard, zero_shard

from titanflow.launch.step_checkpoint import REASONS, SET_ASIDE, damage, set_aside, set_aside_folders


def test_an_intact_save_passes_and_a_truncated_shard_is_named_with_the_bytes_its_metadata_records(tmp_path):
    step_dir = dcp_save(tmp_path, 6)
    assert damage(step_dir) is None
    size = truncate_shard(step_dir, keep=1024)  # DCP writes the items back to back: the last ends at the file's end
    found = damage(step_dir)
    assert (found.reason, found.detail) == ("truncated-shard", f"{SHARD} has 1,024 bytes; its .metadata records "
                                                               f"{size:,}")


def test_a_missing_shard_and_an_unreadable_metadata_are_named(tmp_path):
    missing = dcp_save(tmp_path, 4)
    size = (missing / SHARD).stat().st_size
    (missing / SHARD).unlink()
    found = damage(missing)
    assert (found.reason, found.detail) == ("missing-shard", f"{SHARD} is missing; its .metadata records {size:,} "
                                                             "bytes in it")
    cut = dcp_save(tmp_path, 2)
    metadata = (cut / ".metadata").read_bytes()
    (cut / ".metadata").write_bytes(metadata[:len(metadata) // 2])  # the pickle cut half-way
    found = damage(cut)
    assert found.reason == "unreadable-metadata" and found.detail.startswith(".metadata cannot be read: ")


def test_bytes_that_are_there_but_wrong_pass_the_check_and_fail_only_a_load(tmp_path):
    """What the check cannot see (a stat per file, no tensor read): the ranks' load fails on it, which
    titanflow.launch.torchrun tells as the class checkpoint."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    step_dir = dcp_save(tmp_path, 6)
    zero_shard(step_dir)
    assert damage(step_dir) is None
    state = {"model.w": torch.empty(64, 64), "optimizer.m": torch.empty(64, 64), "step": 0}
    with warnings.catch_warnings(), pytest.raises(CheckpointException):
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(step_dir))


def test_a_set_aside_checkpoint_is_kept_where_torchtitan_neither_loads_nor_purges_it(tmp_path):
    """torchtitan 0.3.0 finds step folders by ``re.search(r"step-(\\d+)", name)`` in the checkpoint folder, to load
    the newest and to purge all but the newest keep_latest_k: a ``step-6.broken-...`` beside them would be either."""
    from torchtitan.components.checkpointer.dcp import CheckpointManager

    folder = tmp_path / "checkpoint"
    for step in (4, 6):
        dcp_save(folder, step)
    assert CheckpointManager._find_load_step(None, folder=str(folder)) == 6
    went = set_aside(folder / "step-6", "truncated-shard")
    assert went == folder / SET_ASIDE / "step-6.broken-truncated-shard" and (went / SHARD).is_file()
    assert CheckpointManager._find_load_step(None, folder=str(folder)) == 4
    assert sorted(p.name for p in folder.iterdir()) == [SET_ASIDE, "step-4"]
    dcp_save(folder, 6)  # saved again by a later launch, and damaged again: kept beside the first
    assert set_aside(folder / "step-6", "truncated-shard").name == "step-6.broken-truncated-shard-2"
    assert [p.name for p in set_aside_folders(folder)] == ["step-6.broken-truncated-shard",
                                                          "step-6.broken-truncated-shard-2"]
    with pytest.raises(ValueError, match=f"reason: 'gone'; fix: one of {', '.join(REASONS)}"):
        set_aside(folder / "step-4", "gone")
