"""The round trip converts a layer at a time and still catches what a whole-model round trip caught:
a tensor transposed, renamed or dropped by the conversion, a tensor missing from the export, a
conversion to another shape; and a layer split over two shards is read whole."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from titan_cfg.compat.cpu import make_importable_without_triton
from titan_cfg.model_spec import qwen3_shape
from titanflow.export.roundtrip import check_round_trip, conversion_groups

make_importable_without_triton()
from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter  # noqa: E402

K_PROJ = "model.layers.1.self_attn.k_proj.weight"  # [2 kv heads x 32, hidden 64]: square, so a transpose fits
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"  # [4 heads x 32, hidden 64]


def _round_trip(folder):
    return check_round_trip(folder, qwen3_shape(folder))


def _patch(monkeypatch, method, change):
    """Replace the adapter's ``method`` by upstream's followed by ``change(converted dict)``."""
    upstream = getattr(Qwen3StateDictAdapter, method)

    def patched(self, state_dict):
        converted = upstream(self, state_dict)
        change(converted)
        return converted

    monkeypatch.setattr(Qwen3StateDictAdapter, method, patched)


def test_groups_are_layers_then_the_rest():
    names = ["model.norm.weight", "model.layers.10.mlp.up_proj.weight", "model.layers.2.mlp.up_proj.weight",
             "model.embed_tokens.weight", "model.layers.2.input_layernorm.weight"]
    assert conversion_groups(names) == [
        ["model.layers.2.input_layernorm.weight", "model.layers.2.mlp.up_proj.weight"],
        ["model.layers.10.mlp.up_proj.weight"], ["model.embed_tokens.weight", "model.norm.weight"]]


def test_transposed_on_the_way_back_differs(tiny_assets, monkeypatch):
    def transpose(hf):
        if K_PROJ in hf:
            hf[K_PROJ] = hf[K_PROJ].t().contiguous()

    _patch(monkeypatch, "to_hf", transpose)
    report = _round_trip(tiny_assets.weights_dir)
    assert (report.differing, report.lost, report.gained) == ([K_PROJ], [], [])


def test_renamed_on_the_way_back_is_lost_and_gained(tiny_assets, monkeypatch):
    def rename(hf):
        if K_PROJ in hf:
            hf["model.layers.1.self_attn.key_proj.weight"] = hf.pop(K_PROJ)

    _patch(monkeypatch, "to_hf", rename)
    report = _round_trip(tiny_assets.weights_dir)
    assert (report.differing, report.lost, report.gained) == (
        [], [K_PROJ], ["model.layers.1.self_attn.key_proj.weight"])


def test_dropped_on_the_way_in_differs(tiny_assets, monkeypatch):
    """A tensor from_hf drops is never loaded: the model's own (uninitialised) tensor goes back."""
    _patch(monkeypatch, "from_hf", lambda titan: titan.pop("layers.1.attention.qkv_linear.wk.weight", None))
    report = _round_trip(tiny_assets.weights_dir)
    assert (report.differing, report.lost, report.gained) == ([K_PROJ], [], [])


def test_converted_to_another_shape_raises_naming_the_key(tiny_assets, monkeypatch):
    def transpose(titan):
        key = "layers.0.attention.qkv_linear.wq.weight"
        if key in titan:
            titan[key] = titan[key].t()

    _patch(monkeypatch, "from_hf", transpose)
    with pytest.raises(ValueError, match=r"wq\.weight of shape \(64, 128\).* has \(128, 64\)"):
        _round_trip(tiny_assets.weights_dir)


def test_tensor_missing_from_the_export_is_gained(tiny_assets, tmp_path):
    folder = tmp_path / "export"
    shutil.copytree(tiny_assets.weights_dir, folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    report = _round_trip(folder)
    assert (report.tensors, report.differing, report.lost, report.gained) == (
        23, [], [], ["model.layers.1.mlp.down_proj.weight"])


def test_a_layer_split_over_two_shards_comes_back_whole(tiny_assets, tmp_path):
    """Shards cut in the middle of layer 0 (as transformers' max_shard_size may cut): bit-exact, 24 tensors."""
    folder = tmp_path / "export"
    shutil.copytree(tiny_assets.weights_dir, folder)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    first = [n for n in names if n.startswith("model.layers.0.")][:3] + ["model.embed_tokens.weight"]
    shards = {"model-00001-of-00002.safetensors": first,
              "model-00002-of-00002.safetensors": [n for n in names if n not in first]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, folder / shard, metadata={"format": "pt"})
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    report = _round_trip(folder)
    assert report.tensors == 24 and report.differing == report.lost == report.gained == []


def test_moe_experts_stacked_per_layer_come_back_bit_exact():
    """The adapter stacks a layer's experts in one call: a layer's group holds them all."""
    from titanflow.assets import TINY_MOE, ensure_assets

    folder = ensure_assets(spec=TINY_MOE).weights_dir
    report = _round_trip(folder)
    assert report.tensors == len(load_file(folder / "model.safetensors"))
    assert report.differing == report.lost == report.gained == []


def test_each_read_is_one_conversion_group(tiny_assets, monkeypatch):
    """The shards are read a group at a time (never the whole export at once), each tensor once."""
    from titanflow.export import roundtrip

    reads = []
    upstream = roundtrip._read_group

    def recorded(export_dir, names, shard_of):
        reads.append(list(names))
        return upstream(export_dir, names, shard_of)

    monkeypatch.setattr(roundtrip, "_read_group", recorded)
    _round_trip(tiny_assets.weights_dir)
    names = load_file(tiny_assets.weights_dir / "model.safetensors").keys()
    assert reads == conversion_groups(names) and len(reads) == 3  # layers 0 and 1, then the rest
