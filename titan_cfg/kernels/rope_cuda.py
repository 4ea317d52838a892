"""``rope=cuda``: RoPE as a Triton kernel behind a ``torch.library`` custom op, HF layout.

Same contract as the cpu op (:mod:`titan_cfg.kernels.rope_cpu`): q [B, N, L, H] and
k [B, N_kv, L, H] in, new tensors out in the input dtype, math in float32,
``out = x * cos + rotate_half(x) * sin``; backward is the same kernel with ``-sin``
(the rotation's transpose). One Triton program rotates one (batch, head, position)
row of ``head_dim`` values: the first and second halves are loaded once and both
output halves written, ``out1 = x1 cos1 - x2 sin1``, ``out2 = x2 cos2 + x1 sin2``.
Importing it needs triton and a CUDA device (the registry reports it unavailable otherwise).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _rope_rows(x_ptr, cos_ptr, sin_ptr, out_ptr, heads, seq_len, cos_batch_stride,
               HALF: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # row = (b * heads + n) * seq_len + l over a contiguous [B, N, L, H]
    position = row % seq_len
    batch = row // (heads * seq_len)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < HALF
    x_row = x_ptr + row * 2 * HALF
    cs_row = batch * cos_batch_stride + position * 2 * HALF
    x1 = tl.load(x_row + offsets, mask=mask).to(tl.float32)
    x2 = tl.load(x_row + HALF + offsets, mask=mask).to(tl.float32)
    cos1 = tl.load(cos_ptr + cs_row + offsets, mask=mask)
    cos2 = tl.load(cos_ptr + cs_row + HALF + offsets, mask=mask)
    sin1 = tl.load(sin_ptr + cs_row + offsets, mask=mask)
    sin2 = tl.load(sin_ptr + cs_row + HALF + offsets, mask=mask)
    out_row = out_ptr + row * 2 * HALF
    tl.store(out_row + offsets, (x1 * cos1 - x2 * sin1).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_row + HALF + offsets, (x2 * cos2 + x1 * sin2).to(out_ptr.dtype.element_ty), mask=mask)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, N, L, H] rotated by cos/sin [1 or B, 1, L, H] (float32)."""
    batch, heads, seq_len, head_dim = x.shape
    if head_dim % 2:
        raise ValueError(f"rope=cuda: head_dim {head_dim} must be even")
    x = x.contiguous()
    cos, sin = (t.float().reshape(t.shape[0], seq_len, head_dim).contiguous() for t in (cos, sin))
    out = torch.empty_like(x)
    half = head_dim // 2
    _rope_rows[(batch * heads * seq_len,)](
        x, cos, sin, out, heads, seq_len, 0 if cos.shape[0] == 1 else seq_len * head_dim,
        HALF=half, BLOCK=triton.next_power_of_2(half))
    return out


@torch.library.custom_op("titanflow::rope_hf_cuda", mutates_args=(), device_types="cuda")
def rope_hf(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate ``q`` [B, N, L, H] and ``k`` [B, N_kv, L, H] (HF layout) by ``cos``/``sin`` [1 or B, 1, L, H]."""
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


@rope_hf.register_fake
def _(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[2], inputs[3])


def _backward(ctx, grad_q: Tensor, grad_k: Tensor):
    cos, sin = ctx.saved_tensors
    return (*rope_hf(grad_q, grad_k, cos, -sin), None, None)


rope_hf.register_autograd(_backward, setup_context=_setup_context)
