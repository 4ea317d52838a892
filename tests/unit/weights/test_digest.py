"""Content hashes of weights folders (titanflow.weights.digest)."""

import hashlib
import os

import pytest

from titanflow.weights.digest import file_digest, weights_digest


def test_a_plain_file_is_hashed_and_a_changed_shard_changes_the_digest(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights v1")
    (tmp_path / "config.json").write_text("{}")
    assert file_digest(tmp_path / "model.safetensors") == hashlib.sha256(b"weights v1").hexdigest()
    first = weights_digest(tmp_path)
    (tmp_path / "config.json").write_text('{"changed": 1}')  # not weights: same digest
    assert weights_digest(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"weights v2")
    assert weights_digest(tmp_path) != first and len(first) == 16


def test_a_hub_cache_blob_is_named_by_its_sha256_and_not_read(tmp_path):
    """huggingface_hub stores an LFS file as blobs/<sha256 of its content>, linked from the snapshot."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    name = "ab" * 32
    (blobs / name).write_bytes(b"not what the name says: proves the file is not read")
    os.symlink(os.path.relpath(blobs / name, snapshot), snapshot / "model.safetensors")
    assert file_digest(snapshot / "model.safetensors") == name


def test_a_folder_without_weights_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        weights_digest(tmp_path)
