"""torchtitan 0.3.0's transformers modeling backend with transformers 5.x: RoPE buffers.

The backend builds the HF model on the meta device, then ``to_empty()`` +
``init_states()``. HF rotary modules compute ``inv_freq`` in ``__init__``, so
``init_states`` recomputes it, but only for modules with a ``rope_init_fn``
attribute; transformers 5.x keeps that function in a local variable, so the
recompute never runs and RoPE reads uninitialised memory. Measured on CPU: the
first-step loss changed from run to run, some runs ended in a NaN loss, and the
exported model's logits differed from the trained model's (KL 1e-3). Applied for
every target whenever the probe says transformers still lacks the attribute.
"""

from __future__ import annotations

import torch


def rope_fix_still_needed() -> bool:
    """True while transformers' Qwen3 rotary module has no ``rope_init_fn`` attribute."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    tiny = Qwen3Config(hidden_size=8, num_attention_heads=1, num_key_value_heads=1, head_dim=8)
    return not hasattr(Qwen3RotaryEmbedding(tiny), "rope_init_fn")


@torch.no_grad()
def recompute_rope_buffers(model: torch.nn.Module) -> int:
    """Recompute ``inv_freq`` (and ``original_inv_freq``, ``attention_scaling``) of every HF rotary
    module from its config; returns how many modules were fixed."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    fixed = 0
    for module in model.modules():
        if not (hasattr(module, "inv_freq") and hasattr(module, "config") and hasattr(module, "rope_type")):
            continue
        rope_fn = (module.compute_default_rope_parameters if module.rope_type == "default"
                   else ROPE_INIT_FUNCTIONS[module.rope_type])
        inv_freq, module.attention_scaling = rope_fn(module.config, device=module.inv_freq.device)
        module.inv_freq.copy_(inv_freq.to(module.inv_freq.dtype))
        if hasattr(module, "original_inv_freq"):
            module.original_inv_freq.copy_(inv_freq.to(module.original_inv_freq.dtype))
        fixed += 1
    return fixed


def apply() -> list[str]:
    """Patch ``HFTransformerModel.init_states`` to recompute RoPE buffers; returns the patch names."""
    if not rope_fix_still_needed():
        return []
    from torchtitan.experiments.transformers_modeling_backend.model import HFTransformerModel

    upstream = HFTransformerModel.init_states

    def init_states_with_rope(self, *args, **kwargs):
        upstream(self, *args, **kwargs)
        recompute_rope_buffers(self.model)

    HFTransformerModel.init_states = init_states_with_rope
    return ["hf_backend_rope_buffers"]
