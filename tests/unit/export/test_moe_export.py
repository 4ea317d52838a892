"""The MoE export checks: per-expert checkpoint keys behind transformers' fused experts, router
agreement, and a transposed expert tensor refused (the tiny MoE's dims are pairwise different)."""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from titanflow.export.load import load_export
from titanflow.hf_folder import checkpoint_keys
from titanflow.assets import TINY_MOE, ensure_assets
from titanflow.export.parity import router_agreement


@pytest.fixture(scope="module")
def tiny_moe():
    return ensure_assets(spec=TINY_MOE).weights_dir


def test_checkpoint_keys_are_the_per_expert_keys_transformers_saved(tiny_moe):
    """transformers 5.x holds experts fused ([E, 2F, D] gate_up_proj, [E, D, F] down_proj) but saves and
    loads one key per expert: the expansion must give exactly the keys of the file it saved."""
    model, _ = load_export(tiny_moe)
    in_file = set(load_file(tiny_moe / "model.safetensors"))
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in model.state_dict())
    assert checkpoint_keys(model) == in_file
    # 4 layers x 8 experts x 3 projections + the rest (embedding, head, norms, attention, routers)
    assert sum(".mlp.experts." in k for k in in_file) == 4 * 8 * 3


def test_transposed_expert_tensor_is_refused_at_load(tiny_moe, tmp_path):
    """down_proj is [hidden 64, expert FFN 48]; transposed it is [48, 64], which cannot load."""
    folder = tmp_path / "moe"
    shutil.copytree(tiny_moe, folder)
    tensors = load_file(folder / "model.safetensors")
    key = "model.layers.2.mlp.experts.5.down_proj.weight"
    assert tuple(tensors[key].shape) == (64, 48)
    tensors[key] = tensors[key].t().contiguous()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RuntimeError, match="conversion"):
        load_export(folder)


def test_router_agreement_counts_layer_token_pairs():
    trained = torch.tensor([[[0, 3], [1, 2], [4, 7]], [[2, 5], [0, 1], [3, 6]]])  # [layers 2, tokens 3, top_k 2]
    assert router_agreement(trained, trained.clone()) == 1.0
    moved = trained.clone()
    moved[1, 2] = torch.tensor([3, 7])  # one token of one layer routed to another expert
    assert router_agreement(trained, moved) == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="moe layers, tokens, top_k"):
        router_agreement(trained, trained[:1])
