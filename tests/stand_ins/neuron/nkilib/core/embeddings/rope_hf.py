"""Stand-in for nki-library's ``nkilib.core.embeddings.rope_hf`` (tests only).

Same signature and contract as the documented kernel: q [B, N, L, H] and k [B, N_kv, L, H] in HBM,
results written into ``q_out``/``k_out`` (also returned), cos/sin [L', H] or [B, L', H] with L' >= L
(or a packed ``rope_cache`` [..., 2H]), arithmetic in the inputs' dtype, seq_len a multiple of 128 x
the LNC grid (``kernel[lnc](...)``), ``backward=True`` for the vector-Jacobian product. Like the
kernel's DMA, it reads every tensor as contiguous row-major memory from its storage offset and writes
the outputs the same way: a strided view handed to it gives scrambled numbers, not an error.

Math (rotate-half): forward ``y1 = x1 c1 - x2 s1``, ``y2 = x2 c2 + x1 s2``; backward (the transpose)
``g1 = x1 c1 + x2 s2``, ``g2 = x2 c2 - x1 s1``, with ``x = [x1, x2]`` split at H/2.
"""

from __future__ import annotations

import nki
import nki.language as nl
import torch

#: Grid size (LNC shards) and backward flag of every call, oldest first.
CALLS: list[tuple[int, bool]] = []


def _memory(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as contiguous row-major memory holds them from its storage offset."""
    strides, step = [], 1
    for size in reversed(t.shape):
        strides.insert(0, step)
        step *= size
    return t.as_strided(t.shape, strides, t.storage_offset())


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c1, c2, s1, s2 = cos[..., :half], cos[..., half:], sin[..., :half], sin[..., half:]
    if backward:
        return torch.cat((x1 * c1 + x2 * s2, x2 * c2 - x1 * s1), dim=-1)
    return torch.cat((x1 * c1 - x2 * s1, x2 * c2 + x1 * s2), dim=-1)


@nki.jit
def rope_hf(q, k, q_out, k_out, cos=None, sin=None, rope_cache=None, backward=False):
    """Rotate q and k (HF layout) into q_out and k_out; see the module docstring."""
    shards = nl.num_programs()
    CALLS.append((shards, backward))
    if q.dim() != 4 or q.shape[-1] != k.shape[-1]:
        raise AssertionError(f"rope_hf: 4-D q and k with one head_dim, got {tuple(q.shape)}, {tuple(k.shape)}")
    if rope_cache is not None:
        if cos is not None or sin is not None:
            raise AssertionError("rope_hf: rope_cache or cos/sin, not both")
        packed = _memory(rope_cache)
        cos, sin = packed[..., :q.shape[-1]], packed[..., q.shape[-1]:]
    elif cos is None or sin is None or cos.shape != sin.shape or cos.shape[-1] != q.shape[-1]:
        raise AssertionError("rope_hf: cos and sin of one shape [.., seq, head_dim] are required")
    else:
        cos, sin = _memory(cos), _memory(sin)
    if not (cos.dim() == 2 or (cos.dim() == 3 and cos.shape[0] == q.shape[0])):
        raise AssertionError(f"rope_hf: cos {tuple(cos.shape)} must be [seq, head_dim] or [batch, seq, head_dim]")
    seq_len = q.shape[2]
    if cos.shape[-2] < seq_len:
        raise AssertionError(f"rope_hf: cos covers {cos.shape[-2]} positions, q has {seq_len}")
    if seq_len % (nl.tile_size.pmax * shards):
        raise AssertionError(f"rope_hf: seq len must be a multiple of 128 * LNC={shards}, got {seq_len}")
    cos, sin = (t[..., :seq_len, :].to(q.dtype) for t in (cos, sin))
    if cos.dim() == 3:  # [B, L, H] -> [B, 1, L, H]: one angle per batch row and position, all heads
        cos, sin = cos[:, None], sin[:, None]
    for x, out in ((q, q_out), (k, k_out)):
        _memory(out).copy_(_rotate(_memory(x), cos, sin, backward))
    return q_out, k_out
