"""Put a folder of stand-in modules (tests/stand_ins/, its README says which) first on ``sys.path``.

``with stand_ins("neuron"):`` makes ``import torch_neuronx``, ``nki`` and ``nkilib`` find the stand-ins;
on exit the folder leaves ``sys.path`` and every module imported from it leaves ``sys.modules``, so a
later test sees this machine as it is (no torch-neuronx). Modules of the project that imported a
stand-in keep their references to it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"


@contextlib.contextmanager
def stand_ins(name: str | Path):
    """Import from ``tests/stand_ins/<name>/`` (or the folder ``name``) first while the block runs;
    yields that folder."""
    folder = STAND_INS / name if isinstance(name, str) else name
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for module_name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
                del sys.modules[module_name]
        importlib.invalidate_caches()


def installed_distributions(folder: Path, **versions: str) -> Path:
    """``folder`` filled with ``.dist-info`` metadata that importlib.metadata reads as installed
    distributions ``{name: version}`` once the folder is on ``sys.path`` (:func:`stand_ins`); returns it."""
    for name, version in versions.items():
        info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return folder


def every_name() -> dict[str, tuple[str, ...]]:
    """titan_cfg.upstream's ``TORCHTITAN`` table and the names titan_cfg.window's probes look for, merged: what a
    stand-in of a torchtitan that has every change of the window holds."""
    from titan_cfg import upstream, window

    merged = dict(upstream.TORCHTITAN)
    for module, names in window.PROBED.items():
        merged[module] = tuple(dict.fromkeys((*merged.get(module, ()), *names)))
    return merged


def generated_fork(folder: Path, names: dict[str, tuple[str, ...]], version: str = "0.2.2+neuron.1",
                   drop: tuple[str, ...] = (), distribution: str = "torchtitan") -> Path:
    """``folder`` filled with a stand-in of the torchtitan fork that holds exactly ``names`` (titan_cfg.upstream's
    ``TORCHTITAN`` table: module -> names, ``"Trainer.train"`` an attribute of a name) as placeholder objects, less
    each dotted name or module in ``drop``, with the fork's ``version`` in a ``.dist-info`` of ``distribution`` (its ``top_level.txt``: torchtitan; importlib.metadata and
    titanflow doctor read it); returns ``folder``. Every module is a package, so a module of the table and its
    submodules both fit; a name that is also a module of the table (``...backend.model``) is that submodule."""
    modules: dict[str, dict] = {}  # module -> {name: {attribute: {...}}}
    for module, taken in names.items():
        if module in drop:
            continue
        modules.setdefault(module, {})
        for dotted in taken:
            if f"{module}.{dotted}" in drop or any(f"{module}.{dotted}".startswith(f"{d}.") for d in drop):
                continue
            home, parts = module, dotted.split(".")
            while len(parts) > 1 and f"{home}.{parts[0]}" in names:  # the name is a submodule of the table
                home, parts = f"{home}.{parts[0]}", parts[1:]
            tree = modules.setdefault(home, {})
            for part in parts:
                tree = tree.setdefault(part, {})
    for module, tree in modules.items():
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            package = folder.joinpath(*parts[:depth])
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        lines = [f'"""Stand-in of the fork\'s {module} (tests only): placeholders for the names titanflow takes."""',
                 "", "import types", ""]
        lines += [f"{name} = {_placeholder(name, attributes)}" for name, attributes in tree.items()
                  if f"{module}.{name}" not in names]
        folder.joinpath(*parts, "__init__.py").write_text("\n".join(lines) + "\n")
    installed_distributions(folder, **{distribution: version})
    (info,) = folder.glob("*.dist-info")
    (info / "top_level.txt").write_text("torchtitan\n")
    return folder


def _placeholder(name: str, attributes: dict) -> str:
    """Python source of a placeholder object named ``name`` with ``attributes`` (each a placeholder in turn)."""
    inner = ", ".join(f"{attribute}={_placeholder(attribute, nested)}" for attribute, nested in attributes.items())
    return f"types.SimpleNamespace(__name__={name!r}{', ' if inner else ''}{inner})"
