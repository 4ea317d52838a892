"""Scaled-dot-product attention that consumes torchtitan's document mask.

torchtitan 0.3.0 builds a FlexAttention ``BlockMask`` (causal AND same-document,
from the dataloader's per-document ``positions``) and its language models accept
only flex/varlen attention. FlexAttention has no backward on CPU, and the
walkthrough's Neuron fork runs ``attn_backend="sdpa"``. :class:`MaskedSDPAttention`
keeps torchtitan's mask construction (its Config subclasses FlexAttention's, so
``Decoder.get_attention_masks`` still builds the BlockMask) and evaluates the
mask's ``mask_mod`` densely, then calls ``F.scaled_dot_product_attention`` with it.
Numerically it is the same attention; the dense [B, 1, L, L] bool mask costs
O(B L^2) memory, fine for the short sequences it is used with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_mask
from torchtitan.models.common.attention import FlexAttention


class MaskedSDPAttention(FlexAttention):
    """Inner attention: SDPA with torchtitan's block-causal document mask made dense.

    Inputs ``q_BLNH`` [batch, seq, n_heads, head_dim], ``k_BLNH`` / ``v_BLNH``
    [batch, seq, n_kv_heads, head_dim]; returns [batch, seq, n_heads, head_dim].
    """

    @dataclass(kw_only=True, slots=True)
    class Config(FlexAttention.Config):
        """FlexAttention's config (so torchtitan still builds the BlockMask); selects this module."""

    def forward(
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: BlockMask,
        scale: float | None = None,
        enable_gqa: bool = False,
        **_unused,
    ) -> torch.Tensor:
        """Attention of ``q_BLNH`` over ``k_BLNH``/``v_BLNH`` where ``attention_masks`` allows; [B, L, N, H] out."""
        if not isinstance(attention_masks, BlockMask):
            raise TypeError(f"MaskedSDPAttention needs a BlockMask, got {type(attention_masks).__name__}")
        batch, seq_len = q_BLNH.shape[0], q_BLNH.shape[1]
        mask_B1LL = create_mask(attention_masks.mask_mod, batch, None, seq_len, seq_len, device=q_BLNH.device)
        out_BNLH = F.scaled_dot_product_attention(
            q_BLNH.transpose(1, 2),
            k_BLNH.transpose(1, 2),
            v_BLNH.transpose(1, 2),
            attn_mask=mask_B1LL,
            scale=scale,
            enable_gqa=enable_gqa,
        )
        return out_BNLH.transpose(1, 2)


def hf_masked_sdpa(module, query_BNLH, key_BNLH, value_BNLH, attention_mask: BlockMask, **kwargs):
    """transformers ``AttentionInterface`` function for torchtitan's transformers backend:
    its BlockMask evaluated densely, then transformers' own ``sdpa_attention_forward``.

    Inputs [batch, heads, seq, head_dim] (HF layout); returns ([batch, seq, heads, head_dim], None).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, _, seq_len, _ = query_BNLH.shape
    mask_B1LL = create_mask(attention_mask.mask_mod, batch, None, seq_len, seq_len, device=query_BNLH.device)
    return sdpa_attention_forward(module, query_BNLH, key_BNLH, value_BNLH, mask_B1LL, **kwargs)


def use_attention(trainer_config, attention: str) -> None:
    """Set the attention of ``trainer_config``'s model: "flex" keeps torchtitan's; "sdpa"
    puts :class:`MaskedSDPAttention` in every layer of a torchtitan decoder, or, for the
    transformers backend, swaps :func:`hf_masked_sdpa` in for transformers'
    ``flex_attention_forward`` in the backend's model module (both of its attention
    paths, the registered ``AttentionInterface`` shim and the per-module
    ``HFFlexKernel``, call that name).

    Raises:
        ValueError: unknown name.
    """
    if attention not in ("flex", "sdpa"):
        raise ValueError(f"attention: unknown implementation {attention!r}; known: flex, sdpa")
    if attention == "flex":
        return
    model_config = trainer_config.model_spec.model
    if hasattr(model_config, "layers"):  # a torchtitan Decoder config
        for layer in model_config.layers:
            layer.attention.inner_attention = MaskedSDPAttention.Config()
    else:
        from torchtitan.experiments.transformers_modeling_backend import model as hf_backend_model

        hf_backend_model.flex_attention_forward = hf_masked_sdpa
