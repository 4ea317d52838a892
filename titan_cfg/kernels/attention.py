"""The ``attention`` op: torchtitan's inner attention, SDPA on its document mask, or SDPA causal over the row.

torchtitan 0.3.0 builds a FlexAttention ``BlockMask`` (causal AND same-document,
from the dataloader's per-document ``positions``) and its language models accept
only flex/varlen attention. FlexAttention has no backward on CPU, and the
walkthrough's Neuron fork runs ``attn_backend="sdpa"``. :class:`KernelAttention`
keeps torchtitan's mask construction (its Config subclasses FlexAttention's, so
``Decoder.get_attention_masks`` still builds the BlockMask), evaluates the mask's
``mask_mod`` densely and hands q/k/v to the chosen implementation in the layout it
declares. Numerically it is the same attention; the dense [B, 1, L, L] bool mask
costs O(B L^2) memory, fine for the sequence lengths it is used with.

The dense path reads the BlockMask's ``mask_mod`` only, never its blocks, so
torchtitan's ``torch.compile(create_block_mask)`` buys it nothing: :func:`install`
swaps in :func:`eager_block_mask`. On the cpu target that compile cost every launch
a dynamo trace and the load of its compiled code (first step 1-2 s slower per
rank, benchmarks/launch_phases.py) and a compile warm-up launch on a cold cache;
eager, the builder takes 4-10 ms for 2 x 256 tokens and 0.11 s for 4096.

For torchtitan's transformers backend, ``sdpa`` swaps :func:`hf_masked_sdpa` in for
transformers' flex attention function in the backend's model module.

``causal`` is the packed row as one sequence: every token attends to every earlier token of its row,
whatever document it belongs to, with RoPE positions 0..L-1 (:mod:`titan_cfg.packed_row` drops the
dataloader's per-document positions). That is attention as torchtitan had it before per-document
positions (pytorch/torchtitan#2560, March 2026) and as the walkthrough's Neuron fork (0.2.2-based) runs it:
``F.scaled_dot_product_attention(is_causal=True)`` with no mask, the form torch-neuronx's fused NKI flash
kernel takes (no attention bias; seq_len a multiple of 512, head_dim <= 128), where a dense mask sends SDPA
to the full L x L path. No mask is built, dense or block.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, create_mask
from torchtitan.models.common.attention import FlexAttention, ScaledDotProductAttention

from titan_cfg import forms, kernels
from titan_cfg.kernels.layout import call_in_layout


def masked_sdpa(q_BNLH, k_BNLH, v_BNLH, *, attn_mask, scale=None, enable_gqa=False):
    """``attention=sdpa``: ``F.scaled_dot_product_attention`` in the HF layout [B, N, L, H] with a
    boolean ``attn_mask`` [B, 1, L, L] (True = attend); returns [B, N, L, H]."""
    return F.scaled_dot_product_attention(q_BNLH, k_BNLH, v_BNLH, attn_mask=attn_mask, scale=scale,
                                          enable_gqa=enable_gqa)


def causal_sdpa(q_BNLH, k_BNLH, v_BNLH, *, scale=None, enable_gqa=False):
    """``attention=causal``: ``F.scaled_dot_product_attention(is_causal=True)`` in the HF layout [B, N, L, H], no
    mask (each position attends to itself and every earlier one of its row); returns [B, N, L, H]."""
    return F.scaled_dot_product_attention(q_BNLH, k_BNLH, v_BNLH, is_causal=True, scale=scale, enable_gqa=enable_gqa)


def dense_mask(block_mask: BlockMask, batch: int, seq_len: int, device) -> torch.Tensor:
    """[batch, 1, seq_len, seq_len] bool: ``block_mask``'s ``mask_mod`` evaluated at every position.

    Raises:
        TypeError: not a BlockMask (this attention needs torchtitan's flex-style masks).
    """
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"KernelAttention needs a BlockMask, got {type(block_mask).__name__}")
    return create_mask(block_mask.mask_mod, batch, None, seq_len, seq_len, device=device)


class KernelAttention(FlexAttention):
    """Inner attention by the registered ``attention`` implementation ``config.implementation``.

    Inputs ``q_BLNH`` [batch, seq, n_heads, head_dim], ``k_BLNH`` / ``v_BLNH``
    [batch, seq, n_kv_heads, head_dim]; returns [batch, seq, n_heads, head_dim].
    """

    @dataclass(kw_only=True, slots=True)
    class Config(FlexAttention.Config):
        """FlexAttention's config (so torchtitan still builds the BlockMask) plus the implementation name."""

        implementation: str = "sdpa"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._kernel, self._layout = kernels.loaded("attention", config.implementation)

    def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks: BlockMask, scale: float | None = None,
                enable_gqa: bool = False, **_unused) -> torch.Tensor:
        """Attention of ``q_BLNH`` over ``k_BLNH``/``v_BLNH`` where ``attention_masks`` allows; [B, L, N, H] out.
        A token-major microbatch (``q_TNH`` [T, N, H], from 2026-08-20: titan_cfg.token_rows) is one row of T
        tokens, whose mask (from its positions) keeps its rows and documents apart; [T, N, H] out."""
        if q_BLNH.dim() == 3:
            return self.forward(q_BLNH[None], k_BLNH[None], v_BLNH[None], attention_masks=attention_masks,
                                scale=scale, enable_gqa=enable_gqa)[0]
        mask = dense_mask(attention_masks, q_BLNH.shape[0], q_BLNH.shape[1], q_BLNH.device)
        return call_in_layout(self._kernel, self._layout, q_BLNH, k_BLNH, v_BLNH,
                              attn_mask=mask, scale=scale, enable_gqa=enable_gqa)


class CausalAttention(ScaledDotProductAttention):
    """Inner attention causal over the packed row by the registered ``attention`` implementation
    ``config.implementation`` (module docstring). Its Config is torchtitan's maskless SDPA config, not a
    FlexAttention one, so torchtitan's trainer builds no mask for it (``Trainer.post_dataloading_process``).

    Inputs ``q_BLNH`` [batch, seq, n_heads, head_dim], ``k_BLNH`` / ``v_BLNH`` [batch, seq, n_kv_heads,
    head_dim]; returns [batch, seq, n_heads, head_dim].
    """

    @dataclass(kw_only=True, slots=True)
    class Config(ScaledDotProductAttention.Config):
        """torchtitan's SDPA config plus the implementation name and ``row_tokens``: the tokens per row of a
        token-major microbatch (the job's seq_len, from 2026-08-20: titan_cfg.token_rows); 0 before it, where the
        rows are the batch dimension."""

        implementation: str = "causal"
        row_tokens: int = 0

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._kernel, self._layout = kernels.loaded("attention", config.implementation)
        self._row_tokens = config.row_tokens

    def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks=None, scale: float | None = None,
                enable_gqa: bool = False, **_unused) -> torch.Tensor:
        """Causal attention of ``q_BLNH`` over ``k_BLNH``/``v_BLNH``; [B, L, N, H] out.

        A token-major microbatch (``q_TNH`` [T, N, H]) is cut into its rows of ``row_tokens``, each causal on its
        own (no attention across rows, as across a batch dimension); [T, N, H] out.

        Raises:
            ValueError: a mask was given (this attention has none: the row is one sequence); a token-major
                microbatch without ``row_tokens``, or not a whole number of rows.
        """
        if attention_masks is not None:
            raise ValueError("CausalAttention takes no attention mask: the packed row is one causal sequence")
        if q_BLNH.dim() == 3:
            rows = causal_rows(q_BLNH.shape[0], self._row_tokens)
            out = self.forward(*(t.reshape(rows, self._row_tokens, *t.shape[1:]) for t in (q_BLNH, k_BLNH, v_BLNH)),
                               scale=scale, enable_gqa=enable_gqa)
            return out.reshape(q_BLNH.shape[0], *out.shape[2:])
        return call_in_layout(self._kernel, self._layout, q_BLNH, k_BLNH, v_BLNH, scale=scale, enable_gqa=enable_gqa)


def causal_rows(tokens: int, row_tokens: int) -> int:
    """How many rows of ``row_tokens`` a token-major microbatch of ``tokens`` holds.

    Raises:
        ValueError: ``row_tokens`` unset (0) or not dividing ``tokens``.
    """
    if row_tokens <= 0 or tokens % row_tokens:
        raise ValueError(f"attention=causal: a token-major microbatch of {tokens} tokens needs rows of the job's "
                         f"seq_len, got row_tokens={row_tokens}; the render sets it (titan_cfg.kernels.attention.install)")
    return tokens // row_tokens


def hf_causal_sdpa(module, query_BNLH, key_BNLH, value_BNLH, attention_mask=None, *, row_tokens: int = 0, **kwargs):
    """transformers ``AttentionInterface`` function for torchtitan's transformers backend under ``causal``:
    transformers' own ``sdpa_attention_forward`` with no mask, so SDPA runs ``is_causal`` over each row
    (whatever mask transformers built for its flex path is not used).

    Inputs [batch, heads, seq, head_dim] (HF layout); returns ([batch, seq, heads, head_dim], None). With
    ``row_tokens`` (a token-major base, from 2026-08-20, gives the backend one row [1, heads, T, head_dim]) the row is
    cut into rows of ``row_tokens``, each causal on its own, and put back: ([1, T, heads, head_dim], None).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    if row_tokens:
        heads, tokens, head_dim = query_BNLH.shape[1:]
        rows = causal_rows(tokens, row_tokens)
        q, k, v = (t.reshape(t.shape[1], rows, row_tokens, head_dim).transpose(0, 1)
                   for t in (query_BNLH, key_BNLH, value_BNLH))
        out_RLNH, weights = sdpa_attention_forward(module, q, k, v, None, is_causal=True, **kwargs)
        return out_RLNH.reshape(1, tokens, *out_RLNH.shape[2:]), weights
    return sdpa_attention_forward(module, query_BNLH, key_BNLH, value_BNLH, None, is_causal=True, **kwargs)


def hf_masked_sdpa(module, query_BNLH, key_BNLH, value_BNLH, attention_mask: BlockMask, **kwargs):
    """transformers ``AttentionInterface`` function for torchtitan's transformers backend:
    its BlockMask evaluated densely, then transformers' own ``sdpa_attention_forward``.

    Inputs [batch, heads, seq, head_dim] (HF layout); returns ([batch, seq, heads, head_dim], None).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, _, seq_len, _ = query_BNLH.shape
    mask = dense_mask(attention_mask, batch, seq_len, query_BNLH.device)
    return sdpa_attention_forward(module, query_BNLH, key_BNLH, value_BNLH, mask, **kwargs)


def eager_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, **kwargs) -> BlockMask:
    """torchtitan's ``create_attention_mask`` (same arguments) without ``torch.compile``: torch's
    ``create_block_mask`` run eagerly. The BlockMask is the same; the dense attention reads its ``mask_mod``."""
    return create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, **kwargs)


def install(trainer_config, implementation: str) -> None:
    """Set the model's inner attention: ``flex`` keeps torchtitan's; ``sdpa`` puts
    :class:`KernelAttention` in every layer of a torchtitan decoder, or, for the transformers
    backend, swaps :func:`hf_masked_sdpa` in for transformers' ``flex_attention_forward`` in the
    backend's model module (both of its attention paths, the registered ``AttentionInterface``
    shim and the per-module ``HFFlexKernel``, call that name). Either way the module's mask builder
    ``create_attention_mask`` becomes :func:`eager_block_mask` (module docstring).
    ``causal`` puts :class:`CausalAttention` in every decoder layer, or :func:`hf_causal_sdpa` in the
    transformers backend, and makes the dataloader the packed row's (titan_cfg.forms.packed_row_loader): no
    per-document positions, so neither a mask nor per-document RoPE. Call it after ``trainer_config.dataloader`` and
    ``trainer_config.training`` are set (a token-major base's rows are ``seq_len`` long: titan_cfg.token_rows).
    """
    if implementation == "flex":
        return
    model_config = trainer_config.model_spec.model
    causal = implementation == "causal"
    # a token-major base (from 2026-08-20) gives attention one row of T tokens: causal cuts it into the job's rows
    row_tokens = forms.seq_len(trainer_config.training) if causal and forms.token_major() else 0
    if causal:
        trainer_config.dataloader = forms.packed_row_loader(trainer_config.dataloader)
    if hasattr(model_config, "layers"):  # a torchtitan Decoder config
        from torchtitan.models.common import decoder

        for layer in model_config.layers:
            layer.attention.inner_attention = (
                CausalAttention.Config(implementation=implementation, row_tokens=row_tokens) if causal
                else KernelAttention.Config(implementation=implementation))
            if causal:
                forms.unmasked(layer.attention)  # a base up to 2026-06-09 also says so in the layer's mask type
        decoder.create_attention_mask = eager_block_mask
    else:
        from torchtitan.experiments.transformers_modeling_backend import model as hf_backend_model

        hf_backend_model.flex_attention_forward = (
            (functools.partial(hf_causal_sdpa, row_tokens=row_tokens) if row_tokens else hf_causal_sdpa) if causal
            else hf_masked_sdpa)
        hf_backend_model.create_attention_mask = eager_block_mask
