"""The registry's layout adapter: permute a tensor between named layouts and back.

A layout is a string of axis letters (``"BLNH"``: batch, sequence, heads, head_dim).
The permutation is derived from the two strings, so an implementation only
declares the layout it expects and never writes its own transposes; the inverse
is the same call with the layouts swapped.
"""

from __future__ import annotations


def permutation(src: str, dst: str) -> tuple[int, ...]:
    """Axis order taking a ``src``-layout tensor to ``dst``: ``dst[i]`` is ``src[perm[i]]``.

    Raises:
        ValueError: the layouts do not name the same axes once each.
    """
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        raise ValueError(f"layouts {src!r} and {dst!r} must name the same axes, once each")
    return tuple(src.index(axis) for axis in dst)


def to_layout(x, src: str, dst: str):
    """``x`` (laid out as ``src``) viewed in layout ``dst``; no copy (a permuted view)."""
    return x if src == dst else x.permute(permutation(src, dst))


def call_in_layout(kernel, layout: str, *tensors_BLNH, **options):
    """Run ``kernel`` in ``layout`` on torchtitan's BLNH tensors and return its output(s) in BLNH.

    Every positional tensor (4-D, BLNH: e.g. q [batch, seq, n_heads, head_dim], or a cos cache
    [1 or batch, seq, 1, head_dim] broadcast over heads) is permuted into ``layout``; ``options``
    (masks, scales) pass through untouched; a tensor output, or each of a tuple's, is permuted back.
    """
    out = kernel(*(to_layout(t, "BLNH", layout) for t in tensors_BLNH), **options)
    if isinstance(out, tuple):
        return tuple(to_layout(o, layout, "BLNH") for o in out)
    return to_layout(out, layout, "BLNH")
