"""``rope=cpu``: RoPE as a ``torch.library`` custom op in the HF layout, with its own backward.

It mirrors what the Neuron kernel needs from PyTorch (an opaque op, a fake/meta
implementation for tracing, an autograd formula, inputs never mutated) so the cpu
target exercises the same registration, layout permutation and backward path.

Math (rotate-half convention, as torchtitan's CosSinRoPE and transformers' Qwen3):
``out = x * cos + rotate_half(x) * sin`` with ``rotate_half([x1, x2]) = [-x2, x1]``,
computed in float32 and returned in the input dtype. The rotation is orthogonal,
so its vector-Jacobian product is the rotation by the opposite angle:
``grad_x = grad_out * cos + rotate_half(grad_out) * (-sin)``, i.e. the same op with ``-sin``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x32 = x.float()
    half = x32.shape[-1] // 2
    rotated_half = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    return (x32 * cos + rotated_half * sin).to(x.dtype).contiguous()


@torch.library.custom_op("titanflow::rope_hf", mutates_args=())
def rope_hf(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate ``q`` [B, N, L, H] and ``k`` [B, N_kv, L, H] (HF layout) by ``cos``/``sin``
    [1 or B, 1, L, H] (float32); returns new contiguous tensors in the inputs' dtypes."""
    if q.shape[-1] % 2:
        raise ValueError(f"rope_hf: head_dim {q.shape[-1]} must be even")
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


@rope_hf.register_fake
def _(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape)


def _setup_context(ctx, inputs, output) -> None:
    _, _, cos, sin = inputs
    ctx.save_for_backward(cos, sin)


def _backward(ctx, grad_q: Tensor, grad_k: Tensor):
    cos, sin = ctx.saved_tensors
    grad_q_in, grad_k_in = rope_hf(grad_q, grad_k, cos, -sin)
    return grad_q_in, grad_k_in, None, None  # cos/sin are the RoPE cache: no gradient


rope_hf.register_autograd(_backward, setup_context=_setup_context)
