"""Small local wheels for the bisect over environments: written directly as the zip a wheel is (PEP 427), because a
package that ships a top-level ``.pth`` file (code run at every interpreter start, as the planted regression needs)
is not something setuptools' own build writes without a custom command.

    wheel(folder, "planted-numerics", "1.1", {"planted_numerics/__init__.py": PLANTED_1_1,
                                               "planted_numerics.pth": "import planted_numerics\\n"})
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

#: planted-numerics 1.0: imported at every start (its .pth), changes nothing.
PLANTED_1_0 = '"""planted-numerics 1.0: nothing changed."""\nLR_SCALE = 1.0\n'

#: planted-numerics 1.1: every torch optimizer step at LR_SCALE times the scheduled learning rate (a global step
#: pre-hook scales each group's lr, the post-hook restores it), installed when torch.optim.optimizer is first
#: imported (a meta path finder: the .pth runs in every process, torch is imported only by those that use it), so
#: in every rank.
PLANTED_1_1 = '''"""planted-numerics 1.1: the optimizer's learning rate scaled by LR_SCALE at every step."""
import importlib.abc
import importlib.util
import sys

LR_SCALE = 300.0


def _patch(module):
    def scale(optimizer, args, kwargs):
        for group in optimizer.param_groups:
            if "lr" in group:
                group["lr"] = group["lr"] * LR_SCALE

    def restore(optimizer, args, kwargs):
        for group in optimizer.param_groups:
            if "lr" in group:
                group["lr"] = group["lr"] / LR_SCALE

    module.register_optimizer_step_pre_hook(scale)
    module.register_optimizer_step_post_hook(restore)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch.optim.optimizer":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if "torch.optim.optimizer" in sys.modules:
    _patch(sys.modules["torch.optim.optimizer"])
else:
    sys.meta_path.insert(0, _Finder())
'''


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def wheel(folder: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """Write ``<folder>/<name>-<version>-py3-none-any.whl`` holding ``files`` ({path in site-packages: text}) and
    its dist-info (METADATA with ``requires`` as Requires-Dist, WHEEL, RECORD); returns its path."""
    stem = name.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                        *(f"Requires-Dist: {r}\n" for r in requires)])
    contents = {**files, f"{info}/METADATA": metadata,
                f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: titanflow-tests\nRoot-Is-Purelib: true\n"
                                 "Tag: py3-none-any\n"}
    encoded = {path: text.encode() for path, text in contents.items()}
    record = "\n".join([*(_record_line(p, d) for p, d in encoded.items()), f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, data in [*encoded.items(), (f"{info}/RECORD", record.encode())]:
            archive.writestr(name_in, data)
    return path


def planted_wheels(folder: Path) -> Path:
    """The planted regression's wheels in ``folder``: planted-numerics 1.0 and 1.1 (1.1 requires zeta-tools>=2.0,
    so the bisect applies zeta-tools first although its name sorts after), zeta-tools 1.0 and 2.0 (a harmless change);
    returns ``folder``."""
    for version, code, requires in (("1.0", PLANTED_1_0, ()), ("1.1", PLANTED_1_1, ("zeta-tools>=2.0",))):
        wheel(folder, "planted-numerics", version, {"planted_numerics/__init__.py": code,
                                                     "planted_numerics.pth": "import planted_numerics\n"}, requires)
    for version in ("1.0", "2.0"):
        wheel(folder, "zeta-tools", version, {"zeta_tools.py": f'"""zeta-tools {version}: nothing."""\n'})
    return folder


def env_file(path: Path, wheels: Path, pins: dict[str, str]) -> Path:
    """A constraints file at ``path``: pip reads only ``wheels`` (--no-index --find-links), then ``pins``."""
    path.write_text("\n".join(["--no-index", f"--find-links {wheels}", *(f"{n}=={v}" for n, v in pins.items())])
                    + "\n")
    return path
