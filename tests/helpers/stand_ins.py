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
