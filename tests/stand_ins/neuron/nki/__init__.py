"""Stand-in for the ``nki`` package (tests only): ``@nki.jit`` kernels and their launch grid.

A real ``@nki.jit`` kernel is compiled and run on a NeuronCore; this one calls the Python function,
with ``nki.language.num_programs()`` answering the launch grid's size (``kernel[2](...)``: 2, the
LNC degree; no brackets: 1).
"""

from __future__ import annotations

import inspect

from nki import language

__all__ = ["jit", "language"]


class JitKernel:
    """What ``@nki.jit`` returns: ``func`` and its signature ``sign`` (torch-neuronx's ``wrap_nki``
    reads both), callable directly (grid 1) or as ``kernel[grid](...)``."""

    def __init__(self, func):
        self.func = func
        self.sign = inspect.signature(func)
        self.__name__ = func.__name__

    def __getitem__(self, grid):
        grid = (grid,) if isinstance(grid, int) else tuple(int(g) for g in grid)
        return lambda *args, **kwargs: language.launch(self.func, grid, args, kwargs)

    def __call__(self, *args, **kwargs):
        return language.launch(self.func, (1,), args, kwargs)


def jit(func=None, **_options):
    """``@nki.jit`` or ``@nki.jit(...)``."""
    if func is None:
        return JitKernel
    return JitKernel(func)
