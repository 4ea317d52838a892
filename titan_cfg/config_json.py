"""A stable JSON view of a torchtitan config tree, for review and golden files.

``Trainer.Config.to_dict()`` drops the class of each nested config (so flex and
SDPA attention look alike) and prints callables with their memory address (so
two renders never compare equal). This view keeps the class of every dataclass
as ``"_class"`` and names callables by module and qualified name.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any


def _callable_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        args = ", ".join([*(repr(a) for a in fn.args), *(f"{k}={v!r}" for k, v in sorted(fn.keywords.items()))])
        return f"partial({_callable_name(fn.func)}, {args})"
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"


def to_plain(obj: Any) -> Any:
    """JSON-ready, address-free copy of ``obj`` (dataclasses, containers, callables, scalars)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        tree = {"_class": f"{cls.__module__}.{cls.__qualname__}"}
        for field in dataclasses.fields(obj):
            tree[field.name] = to_plain(getattr(obj, field.name))
        return tree
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.name
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if callable(obj):
        return _callable_name(obj)
    return repr(obj)
