import json
import shutil

import pytest

from titan_cfg.model_spec import ConfigError, qwen3_shape, rope_theta_of


def _folder_with(tmp_path, instruct_2507_folder, **changes):
    config = json.loads((instruct_2507_folder / "config.json").read_text())
    config.update(changes)
    folder = tmp_path / "edited"
    shutil.copytree(instruct_2507_folder, folder)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not ...}))
    return folder


def test_instruct_2507_shape_keeps_its_rope_base(instruct_2507_folder):
    shape = qwen3_shape(instruct_2507_folder)
    # Published config.json: rope_theta 5e6 (the stock torchtitan "4B" flavor hard-codes 1e6).
    assert shape.rope_theta == 5_000_000
    assert (shape.hidden_size, shape.num_hidden_layers, shape.head_dim) == (2560, 36, 128)
    assert shape.max_position_embeddings == 262_144 and shape.tie_word_embeddings


def test_rope_theta_read_from_both_config_layouts():
    assert rope_theta_of({"rope_theta": 1e6}) == 1e6  # transformers 4.x
    assert rope_theta_of({"rope_parameters": {"rope_type": "default", "rope_theta": 5e6}}) == 5e6  # 5.x


def test_torchtitan_spec_matches_the_checkpoint_not_the_stock_flavor(instruct_2507_folder):
    from titan_cfg.compat.cpu import make_importable_without_triton

    make_importable_without_triton()
    from torchtitan.models.qwen3 import model_registry

    from titan_cfg.model_spec import torchtitan_model_spec

    shape = qwen3_shape(instruct_2507_folder)
    spec = torchtitan_model_spec(shape, flavor="hf:x", max_seq_len=shape.max_position_embeddings)
    attention = spec.model.layers[0].attention
    assert attention.rope.theta == 5_000_000
    assert (spec.model.dim, len(spec.model.layers), attention.n_heads, attention.n_kv_heads) == (2560, 36, 32, 8)
    assert spec.model.enable_weight_tying
    stock = model_registry("4B").model.layers[0].attention.rope.theta
    assert stock == 1_000_000, "upstream's 4B flavor changed its rope base: revisit the pitfall note"


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"model_type": "llama"}, ["model_type", "'llama'"]),
        ({"hidden_size": ...}, ["hidden_size"]),
        ({"num_key_value_heads": 7}, ["num_key_value_heads", "7"]),
        ({"rms_norm_eps": 1e-5}, ["rms_norm_eps"]),
    ],
)
def test_bad_config_names_the_field(tmp_path, instruct_2507_folder, changes, names):
    folder = _folder_with(tmp_path, instruct_2507_folder, **changes)
    with pytest.raises(ConfigError) as err:
        qwen3_shape(folder)
    for name in names:
        assert name in str(err.value)


def test_missing_config_json_is_named(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        qwen3_shape(tmp_path)


@pytest.mark.fault
def test_contradicting_rope_bases_are_refused_not_resolved(tmp_path, instruct_2507_folder):
    """transformers 5.x reads rope_parameters.rope_theta and 4.x the top-level rope_theta: a config.json
    where they disagree would train one base and export another, so it is refused naming both."""
    folder = _folder_with(tmp_path, instruct_2507_folder, rope_theta=1_000_000,
                          rope_parameters={"rope_type": "default", "rope_theta": 5_000_000})
    with pytest.raises(ConfigError, match=r"rope_theta 1000000 and rope_parameters\.rope_theta 5000000"):
        qwen3_shape(folder)
    same = _folder_with(tmp_path / "same", instruct_2507_folder, rope_theta=5_000_000,
                        rope_parameters={"rope_type": "default", "rope_theta": 5_000_000})
    assert qwen3_shape(same).rope_theta == 5_000_000


@pytest.mark.parametrize("folder", ["qwen3-4b-instruct-2507", "qwen3-30b-a3b", "qwen3-30b-a3b-trimmed"])
def test_the_parameter_count_is_transformers_own(folder, tiny_assets):
    """Counted from config.json alone (no torch), equal to transformers' model of that config built on the meta
    device (tied embeddings once, as the checkpoint stores them). Qwen3-4B's 4,022,468,096 is its model card's
    4.0B; Qwen3-30B-A3B's 30,532,122,624 its 30.5B."""
    from helpers import FIXTURES
    from titanflow.weights.check import meta_model

    shape = qwen3_shape(FIXTURES / folder)
    model = meta_model(FIXTURES / folder)
    assert shape.parameters == model.num_parameters()
    known = {"qwen3-4b-instruct-2507": 4_022_468_096, "qwen3-30b-a3b": 30_532_122_624}
    assert shape.parameters == known.get(folder, shape.parameters)
    tiny = tiny_assets.weights_dir  # the embedded tiny model: untied
    assert qwen3_shape(tiny).parameters == meta_model(tiny).num_parameters()
