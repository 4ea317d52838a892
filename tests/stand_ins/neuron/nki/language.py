"""Stand-in for ``nki.language`` (tests only): the launch grid a kernel runs under."""

from __future__ import annotations

#: The grid of the launch in progress (innermost last).
_GRIDS: list[tuple[int, ...]] = []


class tile_size:
    """Partition dimension of an on-chip tile: 128 rows (nki.language.tile_size.pmax)."""

    pmax = 128


def launch(func, grid: tuple[int, ...], args, kwargs):
    """Run ``func`` with ``grid`` as the launch grid."""
    _GRIDS.append(grid)
    try:
        return func(*args, **kwargs)
    finally:
        _GRIDS.pop()


def num_programs(axes: int = 0) -> int:
    """Size of the launch grid along ``axes`` (1 outside a bracketed launch)."""
    return _GRIDS[-1][axes] if _GRIDS and len(_GRIDS[-1]) > axes else 1
