"""A pretrained checkpoint is checked before launch: missing shards (a partial Hub snapshot), unreadable
shards, missing tensors and tensors of another shape are named, in seconds, before anything trains."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from titanflow.weights.check import check_checkpoint, expected_tensors

SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _sharded(folder: Path, source: Path, drop: str | None = None, reshape: str | None = None) -> Path:
    """``source``'s tiny Qwen3 split into two shards plus an index, as published checkpoints are laid out."""
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    tensors = load_file(source / "model.safetensors")
    if drop:
        del tensors[drop]
    if reshape:
        tensors[reshape] = tensors[reshape][:-1].clone()
    names = sorted(tensors)
    halves = {SHARDS[0]: names[: len(names) // 2], SHARDS[1]: names[len(names) // 2:]}
    for shard, keys in halves.items():
        save_file({k: tensors[k] for k in keys}, folder / shard, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in halves.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_a_complete_checkpoint_passes_and_its_tied_head_is_not_expected(tmp_path, tiny_assets):
    folder = _sharded(tmp_path / "tiny", tiny_assets.weights_dir)
    check_checkpoint(folder)
    expected = expected_tensors(folder)
    assert "lm_head.weight" not in expected  # tied: transformers copies the embedding into it
    assert expected["model.embed_tokens.weight"] == [151_936, 64]  # the tiny model's vocab x hidden


@pytest.mark.fault
def test_a_partial_hub_snapshot_names_the_missing_shard_and_how_to_complete_it(tmp_path, tiny_assets):
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "0123abcd"
    _sharded(snapshot, tiny_assets.weights_dir)
    (snapshot / SHARDS[1]).unlink()
    with pytest.raises(ValueError) as err:
        check_checkpoint(snapshot)
    message = str(err.value)
    assert message.startswith("weights: ") and f"lacks {SHARDS[1]}" in message
    assert f"hf download org/tiny {SHARDS[1]}" in message


@pytest.mark.fault
def test_a_truncated_shard_is_named(tmp_path, tiny_assets):
    folder = _sharded(tmp_path / "tiny", tiny_assets.weights_dir)
    shard = folder / SHARDS[0]
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(ValueError, match=f"weights: .*{SHARDS[0]} cannot be read as safetensors"):
        check_checkpoint(folder)


@pytest.mark.fault
def test_a_missing_tensor_and_a_tensor_of_another_shape_are_named(tmp_path, tiny_assets):
    absent = _sharded(tmp_path / "absent", tiny_assets.weights_dir, drop="model.layers.0.input_layernorm.weight")
    with pytest.raises(ValueError, match=r"lacks tensors .*: model\.layers\.0\.input_layernorm\.weight"):
        check_checkpoint(absent)
    cut = _sharded(tmp_path / "cut", tiny_assets.weights_dir, reshape="model.norm.weight")
    with pytest.raises(ValueError, match=r"model\.norm\.weight \[63\] \(expected \[64\]\)"):
        check_checkpoint(cut)


@pytest.mark.fault
def test_the_cli_refuses_a_partial_checkpoint_before_launch(tmp_path, tiny_assets):
    folder = _sharded(tmp_path / "tiny", tiny_assets.weights_dir)
    (folder / SHARDS[1]).unlink()
    titanflow = Path(sys.executable).parent / "titanflow"
    start = time.monotonic()
    done = subprocess.run([str(titanflow), "run", "native", "--target", "cpu", "--init", "pretrained", "--steps", "1",
                           "--weights", str(folder), "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"lacks {SHARDS[1]}" in done.stderr
    assert time.monotonic() - start < 60
    assert list((tmp_path / "runs").glob("*")) == []  # no run folder: refused before anything was written


def test_the_moe_checkpoints_pass_their_experts_checked_by_the_keys_they_load_from(tmp_path):
    from titanflow.assets import TINY_MOE, ensure_assets

    moe = ensure_assets(spec=TINY_MOE).weights_dir
    check_checkpoint(moe)
    expected = expected_tensors(moe)
    # 4 layers x 8 experts x (gate, up, down) per-expert keys, as transformers saved and loads them
    assert len([k for k in expected if ".mlp.experts." in k]) == 4 * 8 * 3


@pytest.mark.fault
def test_the_save_index_must_name_exactly_the_export_tensors(tmp_path, tiny_assets):
    """torchtitan shards the export by the weights folder's index and keeps only what it names: an
    index without a tensor of the model, or naming a layer the model does not have, is refused before
    launch with the names (whatever the init)."""
    from titanflow.weights.check import check_save_index

    folder = _sharded(tmp_path / "tiny", tiny_assets.weights_dir)
    check_save_index(folder)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    deeper = dict(index["weight_map"], **{"model.layers.9.mlp.up_proj.weight": SHARDS[0]})
    index_path.write_text(json.dumps({"weight_map": deeper}))
    with pytest.raises(ValueError, match=r"names model\.layers\.9\.mlp\.up_proj\.weight, which the config"):
        check_save_index(folder)
    lacking = {k: v for k, v in index["weight_map"].items() if k != "model.norm.weight"}
    index_path.write_text(json.dumps({"weight_map": lacking}))
    with pytest.raises(ValueError, match=r"lacks model\.norm\.weight \(torchtitan's HF save would drop them"):
        check_save_index(folder)

