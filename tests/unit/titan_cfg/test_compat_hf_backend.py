"""The transformers-backend RoPE fix is still needed, and it restores the buffers."""

import torch
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

from titan_cfg.compat.hf_backend import recompute_rope_buffers, rope_fix_still_needed


def test_transformers_rotary_module_still_lacks_rope_init_fn():
    assert rope_fix_still_needed(), "torchtitan's own recompute works again: drop titan_cfg/compat/hf_backend.py"


def test_meta_built_rotary_buffers_are_restored():
    config = Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         rope_parameters={"rope_type": "default", "rope_theta": 5e6})
    fresh = Qwen3RotaryEmbedding(config)
    with torch.device("meta"):
        materialised = Qwen3RotaryEmbedding(config)
    materialised = materialised.to_empty(device="cpu")
    materialised.inv_freq.fill_(float("nan"))  # what to_empty may leave behind
    assert recompute_rope_buffers(materialised) == 1
    assert torch.equal(materialised.inv_freq, fresh.inv_freq)
    assert materialised.attention_scaling == fresh.attention_scaling
