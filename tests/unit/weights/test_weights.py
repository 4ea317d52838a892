"""pull_weights resolves the embedded model, local folders and Hub ids, with errors that name them."""

import pytest

from titanflow.run.pretrained import embedded_weights
from titanflow.weights.resolve import WeightsError, resolve_weights


def test_default_is_the_embedded_tiny_model(tiny_assets):
    assert embedded_weights("random") == tiny_assets.weights_dir.resolve()


def test_local_folder_is_used_in_place(tiny_assets):
    assert resolve_weights(str(tiny_assets.weights_dir)) == tiny_assets.weights_dir.resolve()


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(WeightsError, match="does not exist"):
        resolve_weights(str(tmp_path / "nope"))


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(WeightsError, match="no config.json"):
        resolve_weights(str(tmp_path))


def test_hub_id_offline_names_the_id(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # also set by conftest; this machine has no Hub access
    with pytest.raises(WeightsError, match="Qwen/Qwen3-4B-Instruct-2507.*offline"):
        resolve_weights("Qwen/Qwen3-4B-Instruct-2507")
