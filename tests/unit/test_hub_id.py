"""A run's weights as given: a Hub id, or a path on this machine (titanflow.hub_id)."""

from titanflow.hub_id import is_hub_id


def test_hub_ids_and_paths_are_told_apart(tmp_path, monkeypatch):
    assert is_hub_id("Qwen/Qwen3-4B-Instruct-2507")
    assert not is_hub_id("/models/qwen")
    assert not is_hub_id("./models/qwen")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("not a model")
    (tmp_path / "org" / "tiny").mkdir(parents=True)
    assert not is_hub_id("README.md") and not is_hub_id("org/tiny")  # named like Hub ids, but here
