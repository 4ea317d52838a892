"""Stand-in for torch-neuronx's NKI integration (tests only): ``nki_op`` and ``wrap_nki``.

``nki_op(name, mutates_args=...)`` decorates a function into a ``torch.library`` custom op whose
fake (meta) implementation is the function itself, as torch-neuronx documents (the function must
therefore be traceable: allocate outputs with torch, call the kernel through ``wrap_nki``); the
returned object has ``register_autograd`` and ``register_fake`` like any custom op. ``wrap_nki(kernel)``
returns a caller; ``wrap_nki(kernel)[grid](...)`` launches with that grid. Every launch is recorded in
:data:`LAUNCHES` as ``(kernel name, grid, keyword arguments that are not tensors)``.
"""

from __future__ import annotations

import torch

__version__ = "2.14.3.stand-in"

#: (kernel name, grid, non-tensor keyword arguments) per launch, oldest first.
LAUNCHES: list[tuple[str, tuple[int, ...], dict]] = []


class NKICaller:
    """A wrapped NKI kernel; index it with the launch grid, then call it."""

    def __init__(self, kernel, grid: tuple[int, ...] = ()):
        self.kernel, self.grid = kernel, grid

    def __getitem__(self, grid) -> NKICaller:
        return NKICaller(self.kernel, (grid,) if isinstance(grid, int) else tuple(int(g) for g in grid))

    def __call__(self, *args, **kwargs):
        LAUNCHES.append((self.kernel.__name__, self.grid or (1,),
                         {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}))
        return self.kernel[self.grid](*args, **kwargs) if self.grid else self.kernel(*args, **kwargs)


def wrap_nki(kernel) -> NKICaller:
    """A caller for an ``@nki.jit`` kernel that torch.compile could trace."""
    return NKICaller(kernel)


def nki_op(name: str, fn=None, mutates_args=()):
    """Register ``fn`` as the custom op ``name`` (``"namespace::op"``); usable as a decorator."""

    def register(fn):
        op = torch.library.custom_op(name, fn, mutates_args=mutates_args)
        op.register_fake(fn)
        return op

    return register if fn is None else register(fn)
