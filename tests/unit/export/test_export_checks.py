"""The three export levels catch the walkthrough's pitfalls: wrong dtype, damaged shard,
missing index, an untied config without lm_head, a wrong RoPE base (structure, from headers);
a permuted tensor that keeps every shape (parity)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from titanflow.export.parity import check_parity, kl_and_top1
from titanflow.export.structure import check_structure
from titanflow.hf_folder import read_headers

SHARD = "model-00001-of-00001.safetensors"


@pytest.fixture()
def export_dir(tmp_path, tiny_assets) -> Path:
    """The tiny weights laid out as an export: one shard plus its index."""
    folder = tmp_path / "export"
    shutil.copytree(tiny_assets.weights_dir, folder)
    (folder / "model.safetensors").rename(folder / SHARD)
    keys = load_file(folder / SHARD).keys()
    index = {"metadata": {}, "weight_map": {k: SHARD for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_clean_export_has_no_structure_problem(export_dir):
    report = check_structure(export_dir, "float32", 1e6)
    assert report.problems == [] and report.shards == 1 and report.dtypes == {"F32": report.tensors}


def test_float16_export_when_float32_was_asked_is_caught_from_headers(export_dir):
    tensors = {k: v.half() for k, v in load_file(export_dir / SHARD).items()}
    save_file(tensors, export_dir / SHARD, metadata={"format": "pt"})
    assert check_structure(export_dir, "float32", 1e6).problems == [
        "floating tensors in ['F16'], export dtype is float32 (F32)"]


def test_truncated_shard_names_the_file(export_dir):
    data = (export_dir / SHARD).read_bytes()
    (export_dir / SHARD).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=SHARD):
        read_headers(export_dir)


def test_missing_index_is_caught(export_dir):
    (export_dir / "model.safetensors.index.json").unlink()
    assert "model.safetensors.index.json is missing" in check_structure(export_dir, "float32", 1e6).problems


def test_untied_config_without_lm_head_is_caught(export_dir):
    config = json.loads((export_dir / "config.json").read_text())
    (export_dir / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    problems = check_structure(export_dir, "float32", 1e6).problems
    assert any("lack lm_head.weight" in p for p in problems)


def test_rope_base_of_2507_against_a_1e6_export_is_caught(export_dir):
    # Instruct-2507 trains with rope_theta 5e6; an export claiming torchtitan's stock 1e6 is wrong.
    problems = check_structure(export_dir, "float32", 5e6).problems
    assert problems == ["config.json rope_theta is 1000000.0 but the model was trained with 5000000.0"]


def test_kl_and_top1_on_known_inputs():
    logits = torch.randn(1, 5, 11, dtype=torch.float64)
    assert kl_and_top1(logits, logits) == (0.0, 1.0, 0.0)
    kl, top1, diff = kl_and_top1(logits, logits + 1.0)  # a constant shift leaves softmax unchanged
    assert kl == pytest.approx(0.0, abs=1e-12) and top1 == 1.0 and diff == pytest.approx(1.0)


def test_parity_catches_a_permuted_tensor_with_every_shape_right(export_dir, tiny_assets):
    from transformers import AutoModelForCausalLM

    from titan_cfg.probe import probe_ids

    ids = probe_ids(tiny_assets.weights_dir)
    reference = AutoModelForCausalLM.from_pretrained(tiny_assets.weights_dir, dtype=torch.float32)
    with torch.no_grad():
        torch.save({"input_ids": ids, "logits": reference(ids).logits}, export_dir / "probe.pt")
    def exported():
        return AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)

    assert check_parity(exported(), export_dir / "probe.pt").kl == pytest.approx(0.0, abs=1e-12)

    tensors = load_file(export_dir / SHARD)
    q = tensors["model.layers.0.self_attn.q_proj.weight"]  # [heads * head_dim, hidden]: swap two heads
    tensors["model.layers.0.self_attn.q_proj.weight"] = torch.cat([q[32:64], q[:32], q[64:]])
    save_file(tensors, export_dir / SHARD, metadata={"format": "pt"})
    report = check_parity(exported(), export_dir / "probe.pt")
    assert report.kl > 1e-6  # the default threshold (titanflow.params.Tolerances.parity_kl)


def test_round_trip_is_bit_exact_for_the_tiny_model(tiny_assets):
    from titan_cfg.model_spec import qwen3_shape
    from titanflow.export.roundtrip import check_round_trip

    report = check_round_trip(tiny_assets.weights_dir, qwen3_shape(tiny_assets.weights_dir))
    # 2 layers x 11 tensors + embedding + final norm; the tied lm_head is neither lost nor gained
    assert report.tensors == 24 and report.differing == report.lost == report.gained == []


def test_round_trip_catches_a_conversion_that_reorders_a_tensor(tiny_assets, monkeypatch):
    from titan_cfg.compat.cpu import make_importable_without_triton

    make_importable_without_triton()
    from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

    from titan_cfg.model_spec import qwen3_shape
    from titanflow.export.roundtrip import check_round_trip

    upstream = Qwen3StateDictAdapter.to_hf

    def to_hf_with_swapped_heads(self, state_dict):
        hf = upstream(self, state_dict)
        key = "model.layers.1.self_attn.k_proj.weight"  # [kv_heads * head_dim, hidden]: swap the two kv heads
        if key in hf:  # the round trip converts a layer at a time
            hf[key] = torch.cat([hf[key][32:], hf[key][:32]])
        return hf

    monkeypatch.setattr(Qwen3StateDictAdapter, "to_hf", to_hf_with_swapped_heads)
    report = check_round_trip(tiny_assets.weights_dir, qwen3_shape(tiny_assets.weights_dir))
    assert report.differing == ["model.layers.1.self_attn.k_proj.weight"]
